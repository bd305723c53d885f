"""The built-in `harness_classify` task (Meta-Harness: the code around an LLM evolves): its generated
cases, the simulator's documented classifier answers, a better harness scoring better through the
sandbox's link, and a run on the simulator counting the task model's calls."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from evoforge.evaluators.evaluation import EvalOutcome, evaluate_program
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import builtin_tasks_dir, load_task
from evoforge.evaluators.task_model_client import TaskModelClient, attach_channel
from evoforge.infra.llm_sim.classify_model import UNSURE, classification_line
from evoforge.infra.llm_sim.task_model import SIMULATED_LINE, task_model_answer
from evoforge.infra.nodes import EVALUATED
from evoforge.stages.population.repeat_data import RepeatData

TASK = builtin_tasks_dir() / "harness_classify"
BETTER = {"EXAMPLES_PER_LABEL = 1": "EXAMPLES_PER_LABEL = 3", "TEXT_WORDS = 4": "TEXT_WORDS = 6",
          "LABEL_ONLY = False": "LABEL_ONLY = True"}
SYSTEM = "Labels: sports, cooking, music\nExample: goal match referee => sports\n" \
         "Example: oven garlic => cooking\nExample: violin tempo drum => music"


@pytest.fixture(scope="module")
def evaluator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("harness_classify_evaluator", TASK / "evaluator.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "evaluators" / "compat"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module


def test_the_task_is_a_program_task_that_declares_the_task_model() -> None:
    task = load_task("harness_classify")
    assert (task.kind, task.calls_task_model, task.uses_task_model, task.needs_task_model) == \
        ("program", True, False, True)
    assert "llm(messages)" in task.description


def test_evoforge_tasks_lists_it(capsys) -> None:
    from evoforge.flows.commands import cmd_tasks

    assert cmd_tasks() == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("harness_classify")]
    assert line.split()[1:4] == ["program", "maximize", "combined_score"]


def test_cases_are_generated_the_same_every_time_and_balanced(evaluator: ModuleType) -> None:
    examples, cases = evaluator.data()
    assert (examples, cases) == evaluator.data()
    assert len(examples) == len(cases) == 24 and len({c["id"] for c in cases}) == 24
    for label in evaluator.LABELS:
        assert sum(lbl == label for _, lbl in examples) == sum(c["label"] == label for c in cases) == 6
    for case in cases:
        words = case["text"].split()
        assert len(words) == 6 and sum(w in evaluator.TOPIC_WORDS[case["label"]] for w in words) == 3


@pytest.mark.parametrize(("system", "user", "answer"), [
    (SYSTEM, "Text: the referee stopped the match", "I would say sports."),  # two words shared
    (SYSTEM, "Text: a long match", "It could be music, but I would say sports."),  # one: a hedge
    (SYSTEM, "Text: a slow tempo", "It could be cooking, but I would say music."),
    (SYSTEM + "\nAnswer with the label only.", "Text: a long match", "sports"),
    (SYSTEM, "Text: nothing shared here", UNSURE),
    ("Labels: sports, music", "Text: a long match", UNSURE),  # no examples: no prediction
    ("", "Example: oven garlic => cooking\nText: garlic bread", "I would say cooking."),  # one label known
    (SYSTEM, "Which topic is 'a long match'?", None),  # no Text: line in the user message
    ("Start every answer with 'Answer:'.", "Question: What is 17 + 25?", None),  # house_style's
])
def test_the_simulator_classifies_by_the_nearest_example_as_documented(system: str, user: str,
                                                                       answer: str | None) -> None:
    assert classification_line(system, user) == answer
    if answer is not None:
        assert task_model_answer(system, user) == f"{answer}\n{SIMULATED_LINE}"


def _score(code: str, base_url: str) -> EvalOutcome:
    from evoforge.infra.llm.openai_backend import OpenAIBackend

    task = load_task("harness_classify")
    backend = OpenAIBackend(base_url, "evoforge-sim")
    attach_channel(task, TaskModelClient(backend, concurrency=8, max_tokens=256, temperature=0.0, prices={}))

    async def run() -> EvalOutcome:
        try:
            return await evaluate_program(task, code, limits=SandboxLimits(timeout_s=60))
        finally:
            await backend.close()

    return asyncio.run(run())


def test_a_better_harness_scores_better_on_the_simulator() -> None:
    """More examples, the whole text, the label alone: 7/24 -> 21/24, each case one call."""
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess

    seed = load_task("harness_classify").initial_code
    better = seed
    for old, new in BETTER.items():
        better = better.replace(old, new)
    with SimulatorProcess(SimConfig(median_s=0.005, sigma=0.1, slots=16, seed=1)) as sim:
        first, second = _score(seed, sim.base_url), _score(better, sim.base_url)
    assert first.ok and second.ok, (first.error, second.error)
    assert (first.score, second.score) == (7 / 24, 21 / 24)
    assert first.metrics["task_model_calls"] == second.metrics["task_model_calls"] == 24
    assert second.metrics["task_model_tokens_in"] > first.metrics["task_model_tokens_in"]  # more examples
    assert "the model said: It could be" in first.artifacts["mistakes"]  # what the proposer is shown


@pytest.mark.slow
def test_a_run_on_the_simulator_evaluates_harnesses_and_counts_their_calls(tmp_path: Path) -> None:
    """`evoforge run harness_classify` over the simulator with a small budget: evaluated nodes, 24
    task-model calls per evaluation, counted in status.json, `evoforge status`, the money spent and
    each candidate's MLflow run."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from evoforge.flows.cli import main
    from evoforge.flows.commands import status_text
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
    from tests.helpers import read_nodes, read_status

    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    (tmp_path / "c.yaml").write_text("llm: {prices: {evoforge-sim: {input_per_mtok: 1.0, "
                                     "output_per_mtok: 1.0}}}\nbudget: {max_cost_usd: 5.0}\n"
                                     "cognition: {enabled: false}\n")
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)) as sim:
        code = main(["run", "harness_classify", "--run-dir", str(run_dir), "--workspace", str(ws),
                     "--llm-base-url", sim.base_url, "--max-evals", "6", "--seed", "1",
                     "--config", str(tmp_path / "c.yaml"), "--quiet"])
    assert code == 0
    nodes, status = read_nodes(run_dir), read_status(run_dir)
    ran = [n for n in nodes if n.was_evaluated and RepeatData.peek(n).repeat_of is None]
    seed = next(n for n in ran if n.origin == "seed")
    assert len(ran) >= 2 and seed.score_full == 7 / 24
    used = status["task_model"]
    assert all(n.metrics["task_model_calls"] == 24 for n in ran if n.status == EVALUATED)
    assert used["calls"] == sum(n.metrics["task_model_calls"] for n in ran) >= 48
    assert used["failed"] == sum(n.metrics["task_model_failed"] for n in ran)  # e.g. a mutated role
    assert used["cost_usd"] > 0
    assert status["spending"]["spent_usd"] > used["cost_usd"]  # the proposer's calls and the task model's
    assert f"task model    {used['calls']} calls" in status_text(status)
    client = MlflowClient(f"sqlite:///{(ws / 'mlflow.db').resolve()}")
    with mlflow.tracking._tracking_service.utils._use_tracking_uri(client.tracking_uri):
        runs = mlflow.search_runs(experiment_names=["evoforge/harness_classify"], output_format="list",
                                  filter_string=f"tags.node_id = '{seed.id}'")
    assert runs[0].data.metrics["task_model_calls"] == 24
