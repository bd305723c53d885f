"""The verify stage: the Analyzer's causal claims tested by counterfactual runs, on hand-built
parent/child pairs of the planted-cause task (bench/tasks/planted_cause: the score is CAUSE plus
noise, INERT changes nothing), with the evaluator's noise as shipped and switched off."""

from __future__ import annotations

import asyncio
import random
import shutil
import time
from pathlib import Path

from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task, load_task
from evoforge.flows.budget import Budget
from evoforge.infra.config import AnalyzeConfig, BudgetConfig, RunConfig
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.analysis_prompt import analysis_messages
from evoforge.stages.pipeline.extra_evals import ExtraEvaluations
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.stats import RunStats
from evoforge.stages.reports.claims_report import claims_section
from evoforge.stages.reports.status import claims_counts
from evoforge.stages.sample import make_sampler
from evoforge.stages.sinks.cognition_sink import lesson_items
from evoforge.stages.verify import Verify
from evoforge.stages.verify_data import ClaimsData
from evoforge.stages.verify_ledger import Ledger

PLANTED = Path(__file__).resolve().parents[1] / "bench" / "tasks" / "planted_cause"


def _quiet_task(tmp_path: Path) -> Task:
    """The planted-cause task with its noise off: a deterministic evaluator."""
    folder = tmp_path / "planted_quiet"
    shutil.copytree(PLANTED, folder)
    evaluator = folder / "evaluator.py"
    evaluator.write_text(evaluator.read_text().replace("NOISE_SD = 0.002", "NOISE_SD = 0.0"))
    return load_task(folder)


def _pair(task: Task, child_code: str, score: float, claims: list[str]) -> tuple[Item, Node]:
    parent = Node(id="parent", run_id="r", code=task.initial_code, status=EVALUATED, score_full=2.0)
    child = Node(id="child", run_id="r", code=child_code, parent_id="parent", status=EVALUATED,
                 score_full=score, evaluated_at=time.time())
    AnalysisData.of(child).claims = claims
    item = Item(v_i=1, parent=parent)
    item.node = child
    return item, parent


def _verify(task: Task, item: Item, tmp_path: Path, **analyze) -> tuple[Node, Verify]:
    cfg = RunConfig(analyze=AnalyzeConfig(verify_share=1.0, **analyze))
    pool = Pool()
    pool.add(item.parent)
    ctx = RunView("r", task, cfg, OfflineBackend(), pool, make_sampler(cfg.search), random.Random(0),
                  SandboxLimits(), tmp_path)
    stage = Verify()
    stage.ledger = Ledger(1.0, candidates=100)  # a run far enough along to afford every claim
    return asyncio.run(stage.run(item, ctx)).node, stage


def _both_changed(task: Task) -> str:
    return task.initial_code.replace("CAUSE = 2.0", "CAUSE = 3.0").replace("INERT = 5.0", "INERT = 9.0")


def test_a_noisy_evaluator_confirms_the_causal_hunk_and_refutes_the_inert_one(tmp_path):
    task = load_task(PLANTED)
    item, _ = _pair(task, _both_changed(task), 3.0, ["hunk 1: raised the score by about 1.0",
                                                     "- hunk 2: raised the score by about 1.0"])
    node, stage = _verify(task, item, tmp_path, verify_max_claims=2, verify_repeats=3)
    data = ClaimsData.peek(node)
    by_hunk = {c["hunk"]: c for c in data.claims}
    assert data.noisy is True and stage.noisy is True
    assert by_hunk[1]["verdict"] == "confirmed" and by_hunk[1]["form"] == "revert"
    assert abs(by_hunk[1]["effect"] - 1.0) < 0.05 and by_hunk[1]["n"] == 3
    assert by_hunk[2]["verdict"] == "refuted" and abs(by_hunk[2]["effect"]) < 0.05
    assert len(by_hunk[2]["with_scores"]) == 3 and len(by_hunk[2]["without_scores"]) == 3
    assert data.evaluations == 12 and data.eval_s > 0  # per claim: 3 child reruns, 3 counterfactuals
    assert stage.ledger is not None and stage.ledger.spent == 12
    assert 3.0 not in by_hunk[1]["with_scores"]  # the child's own score, which the claim read, is not used
    assert data.verdict() == "refuted"
    item.node = node  # what the head would hand the sinks
    node.artifacts["lessons_by"] = "simulated"
    AnalysisData.of(node).lessons = ["Only CAUSE matters."]
    assert [i.verdict for i in lesson_items(node, "r", "planted_cause")] == ["refuted"]


def test_a_deterministic_evaluator_needs_one_run_a_side(tmp_path):
    task = _quiet_task(tmp_path)
    item, _ = _pair(task, _both_changed(task), 3.0, ["hunk 1: improved it by 1", "hunk 2: improved it by 1"])
    node, stage = _verify(task, item, tmp_path, verify_max_claims=2)
    data = ClaimsData.peek(node)
    by_hunk = {c["hunk"]: c for c in data.claims}
    assert data.noisy is False and stage.noisy is False
    assert by_hunk[1]["verdict"] == "confirmed" and by_hunk[1]["without_scores"] == [2.0]
    assert by_hunk[2]["verdict"] == "refuted" and by_hunk[2]["without_scores"] == [3.0]
    assert data.evaluations == 4  # a rerun and a counterfactual per claim


def test_a_counterfactual_that_cannot_run_gives_way_to_the_parent_with_only_the_hunk(tmp_path):
    task = _quiet_task(tmp_path)
    guarded = task.initial_code.replace("CAUSE = 2.0", "CAUSE = 3.0").replace(
        "INERT = 5.0", "INERT = 5.0\nassert CAUSE > 2.5")  # hunk 2 holds only with hunk 1
    item, _ = _pair(task, guarded, 3.0, ["hunk 1: raised the score by 1.0"])
    node, _ = _verify(task, item, tmp_path)
    claim = ClaimsData.peek(node).claims[0]
    # the child without hunk 1 fails its own assert: the parent with only hunk 1 runs instead
    assert claim["form"] == "only" and claim["verdict"] == "confirmed"
    assert claim["with_scores"] == [3.0] and claim["without_scores"] == [2.0]
    assert ClaimsData.peek(node).evaluations == 4  # rerun, failed revert, only-hunk, parent
    renamed = task.initial_code.replace("CAUSE = 2.0", "LEVEL = 3.0").replace("return CAUSE", "return LEVEL")
    item, _ = _pair(task, renamed, 3.0, ["hunk 2: raised the score by 1.0"])
    node, _ = _verify(task, item, tmp_path)
    claim = ClaimsData.peek(node).claims[0]
    # each hunk needs the other: neither counterfactual runs, and the errors are the evidence
    assert claim["verdict"] == "inconclusive" and "neither counterfactual ran" in claim["error"]
    assert "NameError" in claim["error"]


def test_claims_beyond_the_allowance_stay_unchecked_and_are_counted(tmp_path):
    task = _quiet_task(tmp_path)
    item, _ = _pair(task, _both_changed(task), 3.0, ["hunk 1: raised the score by 1.0",
                                                     "hunk 2: up 0.5", "the change looks good"])
    cfg = RunConfig(analyze=AnalyzeConfig(verify_share=0.1))
    ctx = RunView("r", task, cfg, OfflineBackend(), Pool(), make_sampler(cfg.search), random.Random(0),
                  SandboxLimits(), tmp_path)
    node = asyncio.run(Verify().run(item, ctx)).node  # the run's first candidate: allowance 0.1
    data = ClaimsData.peek(node)
    assert [c["verdict"] for c in data.claims] == ["unchecked", "unchecked"]
    assert data.unparsed == ["the change looks good"] and data.evaluations == 0
    stats = RunStats()
    stats.count(node)
    assert claims_counts(stats) == {"made": 2, "checked": 0, "confirmed": 0, "refuted": 0,
                                    "inconclusive": 0, "verify_evals": 0}
    section = "\n".join(claims_section([node]))
    assert "- made: 2 (claim lines that could not be read: 1)" in section and "- unchecked: 2" in section


def test_with_verification_off_the_analyzer_s_claims_are_still_counted_as_made_and_unchecked(tmp_path):
    task = _quiet_task(tmp_path)
    item, _ = _pair(task, _both_changed(task), 3.0, ["hunk 1: raised the score by 1.0",
                                                     "hunk 2: up 0.5", "the change looks good"])
    assert not Verify().enabled(RunConfig(analyze=AnalyzeConfig(verify_share=0.0)))
    node = item.node  # the verify stage never saw it
    stats = RunStats()
    stats.count(node)
    assert claims_counts(stats)["made"] == 2 and stats.claims["unchecked"] == 2
    section = "\n".join(claims_section([node]))
    assert "- made: 2 (claim lines that could not be read: 1)" in section and "- unchecked: 2" in section
    assert "None was checked: verification is off" in section


def test_a_claim_on_a_hunk_the_change_does_not_have_is_left_unchecked(tmp_path):
    task = _quiet_task(tmp_path)
    item, _ = _pair(task, _both_changed(task), 3.0, ["hunk 7: raised the score by 1.0"])
    node, _ = _verify(task, item, tmp_path)
    claim = ClaimsData.peek(node).claims[0]
    assert claim["verdict"] == "unchecked" and claim["error"] == "the change has no hunk 7 (2 hunks)"


def test_the_analysis_prompt_numbers_the_hunks_and_asks_for_claims(tmp_path):
    task = _quiet_task(tmp_path)
    item, _ = _pair(task, _both_changed(task), 3.0, [])
    cfg = RunConfig()
    ctx = RunView("r", task, cfg, OfflineBackend(), Pool(), make_sampler(cfg.search), random.Random(0),
                  SandboxLimits(), tmp_path)
    prompt = analysis_messages(item, ctx)[-1]["content"]
    assert "### Hunk 1 (parent line 4)\n```diff\n-CAUSE = 2.0\n+CAUSE = 3.0\n```" in prompt
    assert "### Hunk 2 (parent line 12)\n```diff\n-INERT = 5.0\n+INERT = 9.0\n```" in prompt
    assert "## Claims" in prompt and "`- hunk N: raised the score by about X`" in prompt


def test_counterfactual_runs_count_against_the_budget_from_when_they_are_held(tmp_path):
    stats = RunStats(evaluations=10, verify_evals=3)  # a resumed run: 3 counterfactual runs counted
    extra = ExtraEvaluations()
    budget = Budget(BudgetConfig(max_evals=20), stats, extra=extra)
    extra.connect(lambda: budget.remaining(2))
    assert budget.evaluations == 13 and extra.room() == 5
    extra.hold(4)  # a check starts: its worst case is spent at once
    assert budget.evaluations == 17 and extra.room() == 1 and budget.remaining(2) == 1
    extra.settle(held=4, spent=2)
    assert budget.evaluations == 15
    stats.verify_evals += 2  # its node is counted: no double count
    assert budget.evaluations == 15
    task = _quiet_task(tmp_path)  # a check the budget has no room for is not started
    item, _ = _pair(task, _both_changed(task), 3.0, ["hunk 1: raised the score by 1.0"])
    cfg = RunConfig(analyze=AnalyzeConfig(verify_share=1.0))
    ctx = RunView("r", task, cfg, OfflineBackend(), Pool(), make_sampler(cfg.search), random.Random(0),
                  SandboxLimits(), tmp_path)
    ctx.extra_evals.connect(lambda: 7)  # the worst case of a check is 2 × 3 repeats + 2
    stage = Verify()
    stage.ledger = Ledger(1.0, candidates=100)
    node = asyncio.run(stage.run(item, ctx)).node
    assert ClaimsData.peek(node).claims[0]["verdict"] == "unchecked" and ctx.extra_evals.committed == 0
