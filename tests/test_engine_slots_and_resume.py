"""Evaluation concurrency follows the engineer's workers and waits for a slot are not work; a
resumed proposal goes on to where it was going (the engineer), never back to research."""

from __future__ import annotations

import asyncio
import time

from evoforge.evaluators.task import load_task
from evoforge.flows.budget import Budget
from evoforge.flows.engine import Engine
from evoforge.flows.session import open_session
from evoforge.flows.stage_calls import StageCalls
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.types import Completion
from evoforge.infra.nodes import EVALUATED, PROPOSED, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.infra.prompt_format import is_analysis_prompt
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.algorithms import asi_evolve
from evoforge.stages.evaluation.job import EvalReport, EvaluationRunner
from evoforge.stages.evaluation.slots import SlottedEvaluations
from evoforge.stages.pipeline.stage import Stage, StageResult, WorkerBounds
from tests.engine_fakes import FakeResearch, Log, make_harness


class Sleeps(EvaluationRunner):
    """An evaluation that takes `seconds` and scores 1."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def run(self, request, release):
        await asyncio.sleep(self.seconds)
        from evoforge.evaluators.evaluation import EvalOutcome

        return EvalReport(EvalOutcome(ok=True, score=1.0, metrics={}, artifacts={}, error=None,
                                      seconds=self.seconds, cascade_step=None))


class Evaluating(Stage):
    """An engineer stand-in whose work is one evaluation through the run's slots."""

    name, evaluates = "engineer", True

    def __init__(self, workers: int) -> None:
        self.n = workers

    def workers(self, cfg):
        return WorkerBounds(self.n, 1, 8)

    async def run(self, item, ctx):
        await ctx.evaluations.run(None, None)
        return StageResult(item.node.copy(status=EVALUATED, score_full=1.0, evaluated_at=time.time()))


class Trials(Stage):
    """A param-search stand-in: three evaluations per item through the same slots."""

    name, after = "trials", "engineer"

    def workers(self, cfg):
        return WorkerBounds(3, 1, 3)

    async def run(self, item, ctx):
        for _ in range(3):
            await ctx.evaluations.run(None, None)
        return StageResult(item.node)


def test_evaluation_slots_follow_the_engineer_worker_count(tmp_path):
    log = Log()
    slots = SlottedEvaluations(Sleeps(0.05), 2)
    h = make_harness(tmp_path, [FakeResearch(log, 0.0, workers=4), Evaluating(2)], max_evals=40,
                     view={"evaluations": slots})
    seen = []

    async def adapt() -> None:  # what adaptive control does: a worker for the slow engineer, then back
        await asyncio.sleep(0.2)
        h.engine.add_worker("engineer")
        seen.append(slots.slots)
        await asyncio.sleep(0.3)
        h.engine.remove_worker("engineer")
        seen.append(slots.slots)

    asyncio.run(h.run(background=[adapt]))
    h.close()
    assert seen == [3, 2]  # a worker given brings its evaluation slot; one given back takes it
    assert slots.most_running == 3  # the third worker evaluated alongside the other two


def test_a_stage_waiting_for_an_evaluation_slot_is_not_busy(tmp_path):
    log = Log()
    h = make_harness(tmp_path, [FakeResearch(log, 0.0, workers=2), Evaluating(1), Trials()], max_evals=7,
                     view={"evaluations": SlottedEvaluations(Sleeps(0.05), 1)})
    started = time.monotonic()
    asyncio.run(h.run())
    wall = time.monotonic() - started
    h.close()
    trials = h.engine.pools["trials"]
    evaluated = 3 * trials.finished * 0.05  # the seconds its own evaluations took
    assert trials.finished == 6 and wall >= 6 * 4 * 0.05 * 0.9  # one slot: every evaluation in turn
    # three trial workers queued for the one slot: counting the waits would triple the busy time
    assert evaluated * 0.9 <= trials.busy_s <= evaluated * 1.5, (trials.busy_s, evaluated)


class CountingOffline(OfflineBackend):
    """The offline backend, counting the research calls (every call but the Analyzer's)."""

    def __init__(self) -> None:
        super().__init__()
        self.research_calls = 0

    async def complete(self, messages, **kw) -> Completion:
        if not is_analysis_prompt("\n".join(m["content"] for m in messages)):
            self.research_calls += 1
        return await super().complete(messages, **kw)


def test_a_resumed_proposal_goes_to_the_engineer_never_research_again(tmp_path):
    task = load_task("circle_packing")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    code = task.initial_code.replace("# EVOLVE-BLOCK-START\n", "# EVOLVE-BLOCK-START\nRESUMED = 1\n")
    with NodeStore(RunPaths(run_dir).db) as store:  # a run killed after research, before evaluation
        store.write([Node(id="seed", run_id="r", code=task.initial_code, origin="seed", status=EVALUATED,
                          score_full=1.0, evaluated_at=1.0),
                     Node(id="saved", run_id="r", code=code, parent_id="seed", status=PROPOSED,
                          next_stage="engineer", motivation="designed before the kill")],
                    {"run_id": "r", "task": task.name})
    cfg = RunConfig.model_validate({"tracking": {"mlflow": False}, "budget": {"max_evals": 2},
                                    "cognition": {"embedding": "lexical"}, "seed": 1})
    llm = CountingOffline()
    from evoforge.flows.prepare import open_cognition

    cognition = open_cognition(cfg, tmp_path / "ws", task)
    assert cognition is not None and cfg.cognition.enabled  # learn is in the pipeline: the entry stage
    pipeline = asi_evolve.pipeline()
    session = open_session(task, cfg, run_dir, llm, tmp_path / "ws", pipeline, cognition=cognition)
    assert [i.node.id for i in session.resumed] == ["saved"]
    engine = Engine(session.ctx, session.head, Budget(cfg.budget, session.state.stats), pipeline,
                    StageCalls(session.ctx), asyncio.Event())
    assert engine.entry.name == "learn" and engine.resume_at(session.resumed[0]) == "engineer"
    asyncio.run(engine.run(session.resumed))
    session.hub.sync(30)
    saved = session.state.nodes["saved"]
    session.hub.close()
    assert llm.research_calls == 0  # its research call was made (and paid) once, before the kill
    assert saved.code == code and saved.status == EVALUATED and saved.was_evaluated  # its own code
    assert saved.motivation == "designed before the kill"
