"""Every failed proposal carries one reason from the documented set (infra/failure_reasons.py):
set where the failure is recorded, kept in the node database, counted in status.json, `evoforge
status` and report.md; after a stop the counts are the database's; a task-model answer cut off
at max_tokens is the candidate's (low) answer, never a failure; the MLflow sink records every node
of a files task, rejected proposals included."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path

import pytest

from evoforge.evaluators.task import load_task
from evoforge.evaluators.task_model import TaskChannel, TaskModule
from evoforge.flows.commands import status_text
from evoforge.infra import failure_reasons as why
from evoforge.infra.ace_format import parse_reflection
from evoforge.infra.artifacts.files import Files
from evoforge.infra.artifacts.program import Program
from evoforge.infra.evolve_block import EditError
from evoforge.infra.failure_reasons import answer_head
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm.types import Completion, LLMError
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.nodes import EVALUATED, FAILED, PROPOSED, REJECTED, STALE, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.pipeline.candidate import new_candidate
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item
from evoforge.stages.population.stats import RunStats, reason_of
from evoforge.stages.reports.failures_report import failures_section
from evoforge.stages.reports.status import by_reason
from evoforge.stages.research import research
from evoforge.stages.sinks.mlflow_runs import candidate_run
from tests.engine_fakes import FakeEngineer, Log, make_harness
from tests.guard_tasks import make_ctx, make_task

PARENT = '''import math


# EVOLVE-BLOCK-START
def solve():
    return 1.0
# EVOLVE-BLOCK-END


def run():
    return solve()
'''


def _block(search: str, replace: str) -> str:
    return f"Try this.\n\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


@pytest.mark.parametrize(("answer", "reason"), [
    ("I would make it faster, but here is no edit.", why.NO_EDIT),
    ("Faster.\n```python\ndef solve():\n    return 2.0\n", why.NO_EDIT),  # an unterminated fence
    ("Faster.\n<<<<<<< SEARCH\n    return 1.0\n=======\n    return 2.0\n", why.NO_EDIT),  # unterminated
    ("", why.EMPTY),
    (_block("    return 1.0\n", "    return 1.0\n"), why.EMPTY),
    (_block("    return 7.0\n", "    return 2.0\n"), why.MALFORMED),  # the SEARCH text is not there
    (_block("import math\n", "import os\n"), why.FROZEN),
    (_block("    return 1.0\n", "    return (2.0\n"), why.SYNTAX),
])
def test_each_unusable_answer_carries_the_reason_of_what_is_wrong_with_it(answer: str, reason: str) -> None:
    with pytest.raises(EditError) as caught:
        Program(program_name="p.py").apply(PARENT, answer)
    assert caught.value.reason == reason, str(caught.value)
    assert "cut off" not in str(caught.value)  # said of answers that ended normally: never


def test_a_files_answer_outside_the_listed_files_or_without_a_file_line_has_its_reason() -> None:
    kind = Files(files=("a.py", "b.py"))
    parent = "### FILE: a.py\nx = 1\n### FILE: b.py\ny = 2\n"
    with pytest.raises(EditError) as outside:
        kind.apply(parent, "Edit.\n### FILE: evaluator.py\n```python\nz = 3\n```\n")
    assert outside.value.reason == why.FROZEN
    with pytest.raises(EditError) as unnamed:
        kind.apply(parent, "Replace it.\n```python\nx = 5\n```\n")  # a fenced file under no FILE line
    assert unnamed.value.reason == why.MALFORMED
    with pytest.raises(EditError) as nothing:
        kind.apply(parent, "No edit at all, sorry.")
    assert nothing.value.reason == why.NO_EDIT


def test_an_ace_reflection_without_json_is_no_edit_and_one_that_is_not_a_reflection_is_malformed() -> None:
    with pytest.raises(EditError) as none:
        parse_reflection("I think the playbook is fine.")
    assert none.value.reason == why.NO_EDIT
    for broken in ('{"key_insight": 3}', "```json\n{not json}\n```", "```json\n[1, 2]\n```"):
        with pytest.raises(EditError) as bad:
            parse_reflection(broken)
        assert bad.value.reason == why.MALFORMED, broken


class _Answers:
    """An LLM that answers `text`, or fails with an LLMError of `reason`."""

    name, model = "scripted", "scripted"

    def __init__(self, text: str | None = None, reason: str = why.SERVER_ERROR) -> None:
        self.text, self.reason = text, reason

    async def complete(self, messages, *, temperature, max_tokens):
        if self.text is None:
            raise LLMError("the server gave no answer", "scripted", 120, 0, reason=self.reason)
        return Completion(self.text, "scripted", "openai", 120, 40, 0.1)


@pytest.mark.parametrize(("llm", "reason"), [
    (_Answers("Make it faster; no edit here, sorry."), why.NO_EDIT),
    (_Answers("Nothing.\n```python\n```\n"), why.EMPTY),
    (_Answers(reason=why.TIMEOUT), why.TIMEOUT),
    (_Answers(reason=why.TRUNCATED), why.TRUNCATED),
])
def test_research_records_the_reason_where_the_proposal_fails(tmp_path: Path, llm, reason: str,
                                                               caplog) -> None:
    task = make_task(tmp_path / "t")
    parent = Node(id="seed", run_id="r", code=task.initial_code, status=EVALUATED, score_full=1.0)
    with caplog.at_level(logging.INFO, logger="evoforge.research"):
        result = asyncio.run(research(Item(v_i=0, parent=parent), make_ctx(task, tmp_path, llm=llm)))
    node = result.node
    assert node.status == FAILED and node.failed_stage == "research" and node.reason == reason
    assert node.tokens_in == 120  # the answer's usage, used or not
    if llm.text is not None:  # an unusable answer: run.log shows its head
        assert f"unusable answer ({reason})" in caplog.text
        assert f"the answer begins: {answer_head(llm.text)!r}" in caplog.text


def _node(node_id: str, status, **fields) -> Node:
    return Node(id=node_id, run_id="r", code="", status=status, **fields)


def test_the_counts_by_reason_come_from_the_nodes_and_the_text_shows_each_bucket() -> None:
    nodes = [
        _node("a", FAILED, failed_stage="research", reason=why.NO_EDIT, tokens_in=3348, tokens_out=960),
        _node("b", FAILED, failed_stage="research", reason=why.NO_EDIT),
        _node("c", FAILED, failed_stage="research", reason=why.TRUNCATED),
        _node("d", REJECTED, failed_stage="gate", reason=why.GUARD),  # a gate's rejection
        _node("e", REJECTED, failed_stage="engineer", reason=why.DUPLICATE),
        _node("f", STALE, reason=why.STALE),
        _node("g", FAILED, failed_stage="engineer", reason=why.EVALUATION, evaluated_at=1.0),
        _node("h", EVALUATED, score_full=1.0, evaluated_at=2.0),
    ]
    stats = RunStats.rebuild(nodes)
    assert by_reason(stats.failures_by_reason) == {why.NO_EDIT: 2, why.TRUNCATED: 1, why.GUARD: 1,
                                                    why.DUPLICATE: 1, why.STALE: 1, why.EVALUATION: 1}
    assert stats.duplicates == 1  # the gate's rejection is not a duplicate
    assert (stats.tokens_in, stats.tokens_out) == (3348, 960)
    status = {"task": "t", "run_id": "r", "state": "interrupted", "backend": "openai", "model": "m",
              "evaluations": stats.evaluations, "max_evals": 10, "nodes_evaluated": stats.evaluated_ok,
              "failed_evaluation": stats.failed_evaluation, "nodes_failed": stats.failed,
              "dropped_stale": stats.dropped_stale, "failures_by_reason": by_reason(stats.failures_by_reason),
              "candidates_per_min": 1.0, "wall_s": 60.0, "tokens_in": stats.tokens_in,
              "tokens_out": stats.tokens_out}
    text = status_text(status)
    assert "failures      7  (2 no edit found, 1 truncated at max_tokens, 1 guard, 1 duplicate, 1 stale, " \
           "1 evaluation failed)" in text
    assert "not evaluated 6  " in text and "unusable answer" not in text
    assert "tokens        3348 in, 960 out" in text
    section = "\n".join(failures_section(nodes))
    assert "| no edit found | 2 |" in section and "| guard | 1 |" in section


def test_a_node_recorded_without_a_reason_gets_the_bucket_its_outcome_says() -> None:
    assert reason_of(_node("a", FAILED, failed_stage="research", error="LLM call failed: HTTP 500")) \
        == why.SERVER_ERROR
    assert reason_of(_node("b", FAILED, failed_stage="research", error="unusable answer: x")) == why.NO_EDIT
    assert reason_of(_node("c", FAILED, failed_stage="reflector")) == why.INTERNAL
    assert reason_of(_node("d", FAILED, failed_stage="engineer", evaluated_at=1.0)) == why.EVALUATION
    assert reason_of(_node("e", REJECTED, failed_stage="gate")) == why.GUARD
    assert reason_of(_node("f", EVALUATED)) is None


def test_the_reason_is_a_column_of_the_node_database_and_a_reopened_run_keeps_it(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "nodes.duckdb") as store:
        store.put(_node("a", FAILED, failed_stage="research", reason=why.TRUNCATED))
    with NodeStore(tmp_path / "nodes.duckdb", read_only=True) as store:
        assert store.get("a").reason == why.TRUNCATED


class _FailsThenOn(Stage):
    """A checkpointing stage that fails its node (with its tokens) and sends it on, as the debug
    stage sends an unrepaired candidate to the analysis."""

    name, checkpoint = "research", True

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        node = new_candidate(item, ctx)
        node.status, node.failed_stage, node.reason = FAILED, "research", why.TRUNCATED
        node.tokens_in, node.tokens_out, node.error = 3348, 960, "LLM call failed: cut off"
        return StageResult(node)


class _Hangs(Stage):
    """The stage after it (the analysis): never ends."""

    name, after = "analyze", "research"

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_after_a_stop_the_run_counts_what_the_node_database_holds_tokens_included(tmp_path: Path) -> None:
    h = make_harness(tmp_path, [_FailsThenOn(), _Hangs(), FakeEngineer(Log())], max_evals=10)

    async def scenario() -> None:
        run = asyncio.ensure_future(h.engine.run())
        for _ in range(200):
            await asyncio.sleep(0.01)
            if h.engine.pools["analyze"].busy:
                break
        assert h.engine.pools["analyze"].busy  # a failed node is persisted, on its way on
        h.stop.set()  # Ctrl+C
        await asyncio.wait_for(run, 5)

    asyncio.run(scenario())
    stored = [n for n in h.nodes() if n.origin != "seed"]
    failed = [n for n in stored if n.status == FAILED]
    assert failed and not [n for n in stored if n.status == PROPOSED]
    stats = h.state.stats
    assert stats.failed == len(failed) and stats.failures_by_reason == {why.TRUNCATED: len(failed)}
    assert (stats.tokens_in, stats.tokens_out) == (sum(n.tokens_in for n in stored),
                                                   sum(n.tokens_out for n in stored)) != (0, 0)
    h.close()


def test_a_task_model_answer_cut_off_at_max_tokens_is_a_low_score_not_a_failure() -> None:
    module = TaskModule(load_task("house_style"))
    val = module.ids("val")

    async def evaluate(base_url: str, model: str):
        backend = OpenAIBackend(base_url, model, max_retries=0, timeout_s=20)
        channel = TaskChannel(module, backend, concurrency=4, max_tokens=1, temperature=0.0, prices={})
        try:
            return await channel.evaluate("Answer the question.\n", val)
        finally:
            await backend.close()

    with SimulatorProcess(SimConfig(median_s=0.0, sigma=0.0, slots=8, seed=1)) as sim:
        outcome = asyncio.run(evaluate(sim.base_url, sim.config.model))
    assert outcome.ok and outcome.error is None  # every answer was cut off: the prompt's low score
    assert outcome.score is not None and outcome.score < 0.3 and outcome.cases_done == len(val)
    assert outcome.metrics["task_model_truncated"] == len(val)
    assert outcome.metrics["task_model_failed"] == 0 and outcome.metrics["task_model_tokens_out"] > 0


def test_mlflow_records_a_rejected_proposal_of_a_files_task_without_its_files() -> None:
    kind = load_task("tour_files").artifact
    node = _node("x", FAILED, failed_stage="research", reason=why.NO_EDIT,
                 error="unusable answer: no SEARCH/REPLACE block and no fenced code block in the answer")
    run = candidate_run(node, "full", None, kind)  # "no '### FILE: <path>' line" before
    assert run.tags["reason"] == why.NO_EDIT and run.status == "FAILED"
    assert not [name for name in run.texts if name.startswith("files/")]
    assert run.texts["error.txt"].startswith("unusable answer")


CONFIG = """\
llm: {timeout_s: 5, max_retries: 1, backoff_s: 0.05, max_tokens: 4096}
analyze: {enabled: false}
guard: {repair_attempts: 0}
cognition: {enabled: false}
"""


@pytest.mark.slow
def test_a_files_run_with_unusable_answers_buckets_each_failure_and_records_each_node(tmp_path: Path) -> None:
    """tour_files over the simulator, with answers that carry no edit or are cut off: every failed
    node has a reason of the set, status.json and `evoforge status` count them as the database
    does, report.md lists them, run.log shows the answers' heads, and MLflow has a run per node."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from evoforge.flows.cli import main
    from tests.helpers import read_nodes, read_status

    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    (tmp_path / "c.yaml").write_text(CONFIG)
    sim_cfg = SimConfig(median_s=0.01, sigma=0.2, slots=8, seed=11, error_rate=0.4,
                        error_kinds=("malformed", "truncated"))
    with SimulatorProcess(sim_cfg) as sim:
        code = main(["run", "tour_files", "--run-dir", str(run_dir), "--workspace", str(ws), "--llm-base-url",
                     sim.base_url, "--max-evals", "8", "--workers", "research=4,engineer=2", "--seed", "2",
                     "--config", str(tmp_path / "c.yaml"), "--quiet", "--no-prefect-tasks"])
    assert code == 0
    nodes = read_nodes(run_dir)
    ended = [n for n in nodes if n.status in (FAILED, REJECTED, STALE)]
    research = [n for n in ended if n.failed_stage == "research"]
    assert research and all(n.reason in why.ALL for n in ended)
    assert {n.reason for n in research} <= {why.NO_EDIT, why.EMPTY, why.MALFORMED, why.FROZEN, why.SYNTAX,
                                            why.TRUNCATED}
    counted: dict[str, int] = {}
    for node in ended:
        counted[node.reason] = counted.get(node.reason, 0) + 1
    status = read_status(run_dir)
    assert status["failures_by_reason"] == by_reason(counted)
    assert why.INTERNAL not in status["failures_by_reason"]
    assert status["tracking_failures"] == {}  # the MLflow sink failed on no node
    text = status_text(status)
    for reason, count in counted.items():
        assert re.search(rf"\b{count} {re.escape(reason)}\b", text), reason
    report = (run_dir / "report.md").read_text()
    assert "## Failures by reason" in report and f"| {research[0].reason} |" in report
    log = (run_dir / "run.log").read_text()
    assert "unusable answer" in log and "the answer begins:" in log
    assert json.loads((run_dir / "nodes" / research[0].id / "result.json").read_text())["reason"] \
        == research[0].reason
    client = MlflowClient(f"sqlite:///{(ws / 'mlflow.db').resolve()}")
    with mlflow.tracking._tracking_service.utils._use_tracking_uri(client.tracking_uri):
        runs = mlflow.search_runs(experiment_names=["evoforge/tour_files"], output_format="list",
                                  filter_string="tags.kind = 'candidate'")
    recorded = {r.data.tags["node_id"]: r.data.tags.get("reason", "") for r in runs}
    assert recorded == {n.id: n.reason or "" for n in nodes if n.status.terminal}


def test_the_guide_documents_every_reason_with_its_one_line() -> None:
    guide = (Path(__file__).parent.parent / "docs" / "guide" / "watching.md").read_text()
    for reason in why.ALL:
        assert f"- `{reason}`: {why.MEANING[reason]}." in guide, reason
