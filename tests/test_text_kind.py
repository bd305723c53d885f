"""The `text` artifact kind and its task model: a prompt scored by running it with an LLM on the
cases of a split, each output cached by (prompt, case), the calls bounded and counted apart, a
failed call scoring its case 0 with the reason, bad task folders one line, no offline stand-in."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evoforge.evaluators.task import TaskError, load_task
from evoforge.evaluators.task_model import TaskChannel, TaskModule
from evoforge.infra.llm.types import Completion, LLMError
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.population.repeat_data import RepeatData

EVALUATOR = '''
def cases():
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]
    make = lambda split, ws: [{"id": f"{split}-{i}", "word": w} for i, w in enumerate(ws)]
    return {"train": make("train", words[:4]), "val": make("val", words), "test": make("test", words[:2])}

async def run(prompt, case, llm):
    return await llm([{"role": "system", "content": prompt}, {"role": "user", "content": case["word"]}])

def metric(case, output):
    return 1.0 if output.startswith(case["word"].upper()) else 0.0

def feedback(case, output, score):
    return "" if score == 1.0 else "The answer must repeat the word in capitals."
'''


class Shouter:
    """A stand-in for the task model (no LLM runs here): shouts the word when the system prompt
    says 'capitals', else whispers it; counts calls and the most in flight at once."""

    model, name = "shouter", "test"

    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.fail, self.calls, self.flying, self.most = fail, 0, 0, 0

    async def complete(self, messages, *, temperature, max_tokens):
        self.calls += 1
        self.flying += 1
        self.most = max(self.most, self.flying)
        try:
            await asyncio.sleep(0.01)
            word = messages[-1]["content"]
            if word in self.fail:
                raise LLMError("HTTP 500 from the server")
            text = word.upper() if "capitals" in messages[0]["content"] else word.lower()
            return Completion(text=text, model=self.model, backend=self.name, tokens_in=10, tokens_out=2,
                              seconds=0.01)
        finally:
            self.flying -= 1


def _task(tmp_path: Path, evaluator: str = EVALUATOR, yaml: str = "kind: text\nprompt: prompt.md\n") -> Path:
    root = tmp_path / "shout"
    root.mkdir(exist_ok=True)
    (root / "prompt.md").write_text("Repeat the word.\n")
    (root / "evaluator.py").write_text(evaluator)
    (root / "task.yaml").write_text(yaml)
    return root


def _channel(tmp_path: Path, backend: Shouter, concurrency: int = 3) -> tuple[TaskChannel, list[str]]:
    module = TaskModule(load_task(_task(tmp_path)))
    channel = TaskChannel(module, backend, concurrency=concurrency, max_tokens=16, temperature=0.0,
                          prices={})
    return channel, module.ids("val")


def test_a_prompt_is_scored_on_the_val_cases_with_feedback_and_its_usage(tmp_path: Path) -> None:
    backend = Shouter()
    channel, val = _channel(tmp_path, backend)
    plain = asyncio.run(channel.evaluate("Repeat the word.\n", val))
    assert plain.ok and plain.score == 0.0 and plain.cases_done == 10
    first = plain.artifacts["feedback"].splitlines()[0]
    assert first == "[val-0] The answer must repeat the word in capitals."
    better = asyncio.run(channel.evaluate("Repeat the word in capitals.\n", val))
    assert better.score == 1.0 and "feedback" not in better.artifacts
    assert better.metrics["task_model_calls"] == 10 and better.metrics["task_model_tokens_in"] == 100
    assert channel.usage.calls == 20 and backend.calls == 20


def test_no_case_is_paid_twice_for_the_same_prompt(tmp_path: Path) -> None:
    backend = Shouter()
    channel, val = _channel(tmp_path, backend)
    first = asyncio.run(channel.evaluate("Repeat the word in capitals.\n", val))
    again = asyncio.run(channel.evaluate("Repeat the word in capitals.\n", val))
    assert backend.calls == 10  # the second evaluation was served from the cache
    assert again.case_scores == first.case_scores and again.metrics["task_model_cached"] == 10
    asyncio.run(channel.evaluate("Repeat the word in capitals!\n", val))
    assert backend.calls == 20  # another text: paid again


def test_calls_run_at_once_up_to_the_concurrency_and_no_further(tmp_path: Path) -> None:
    backend = Shouter()
    channel, val = _channel(tmp_path, backend, concurrency=3)
    asyncio.run(channel.evaluate("x\n", val))
    assert backend.most == 3


def test_a_failed_call_scores_its_case_0_with_the_reason_and_is_not_cached(tmp_path: Path) -> None:
    backend = Shouter(fail={"gamma"})
    channel, val = _channel(tmp_path, backend)
    outcome = asyncio.run(channel.evaluate("Repeat the word in capitals.\n", val))
    assert outcome.ok and outcome.case_scores["val-2"] == 0.0 and outcome.score == pytest.approx(0.9)
    assert "[val-2] task model call failed: HTTP 500 from the server" in outcome.artifacts["feedback"]
    assert outcome.metrics["task_model_failed"] == 1
    asyncio.run(channel.evaluate("Repeat the word in capitals.\n", val))
    assert backend.calls == 11  # the failed case was asked again; the nine others were cached


def test_a_candidate_whose_every_call_failed_is_a_failed_evaluation(tmp_path: Path) -> None:
    words = {"alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"}
    channel, val = _channel(tmp_path, Shouter(fail=words))
    outcome = asyncio.run(channel.evaluate("x\n", val))
    assert not outcome.ok and outcome.score is None
    assert outcome.error == "task model: every call failed (last: HTTP 500 from the server)"


def test_a_stop_asked_after_a_prefix_cancels_the_cases_left(tmp_path: Path) -> None:
    backend = Shouter()
    channel, val = _channel(tmp_path, backend, concurrency=2)
    outcome = asyncio.run(channel.evaluate("capitals\n", val, on_case=lambda r: r.index < 3))
    assert outcome.stopped_early and outcome.cases_done == 4 and list(outcome.case_scores) == val[:4]
    assert backend.calls <= 6  # the prefix and the calls in flight, not all ten


@pytest.mark.parametrize(("evaluator", "message"), [
    (EVALUATOR.replace('"val": make("val", words), ', ""), "the 'val' split is missing or empty"),
    (EVALUATOR.replace('make("test", words[:2])', 'make("val", words[:2])'), "case id 'val-0' appears twice"),
    (EVALUATOR.replace('"train": make', '"dev": make'), "unknown split 'dev'"),
    (EVALUATOR.replace("def cases():", "def cases():\n    return [1]\ndef unused():"), "must return a dict"),
    (EVALUATOR.replace("async def run", "async def go"), "no top-level function 'run(artifact, case, llm)'"),
    (EVALUATOR.replace("def metric", "def score"), "no top-level function 'metric(case, output)'"),
])
def test_a_malformed_text_task_is_one_line_naming_it(tmp_path: Path, evaluator: str, message: str) -> None:
    with pytest.raises(TaskError) as caught:
        TaskModule(load_task(_task(tmp_path, evaluator)))
    assert message in str(caught.value) and str(caught.value).startswith("evaluator.py")


@pytest.mark.parametrize(("yaml", "message"), [
    ("kind: text\n", "task.yaml: kind text needs 'prompt'"),
    ("kind: text\nprompt: missing.md\n", "task.yaml: prompt 'missing.md' does not exist"),
    ("prompt: prompt.md\n", "task.yaml: 'prompt' is for kind text"),
])
def test_a_malformed_text_task_yaml_is_one_line(tmp_path: Path, yaml: str, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        load_task(_task(tmp_path, yaml=yaml))


def test_a_text_task_without_an_llm_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    from evoforge.flows.cli import main

    code = main(["run", str(_task(tmp_path)), "--workspace", str(tmp_path / "ws"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].endswith("task 'shout' is a text task: a task model (an LLM) runs its prompt on the "
                            "cases, and the offline proposer cannot; set --llm-base-url (or task_model.llm)")


def test_a_prompt_evolves_over_the_simulator_with_its_task_model_counted_apart(tmp_path: Path) -> None:
    """house_style end to end through the openai client: the proposer learns the house rules from
    the feedback on failed cases, the task model's calls are counted apart from the proposer's (in
    status.json, `evoforge status` and each candidate's MLflow run), the best prompt is kept."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from evoforge.flows.cli import main
    from evoforge.flows.commands import status_text
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
    from evoforge.infra.prompt_format import FEEDBACK_HEADER
    from tests.helpers import read_nodes, read_status

    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    (tmp_path / "c.yaml").write_text("speculation: {alpha_spec: 0.25}\n")  # released on a val prefix
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)) as sim:
        code = main(["run", "house_style", "--run-dir", str(run_dir), "--workspace", str(ws),
                     "--llm-base-url", sim.base_url, "--max-evals", "20", "--workers",
                     "research=4,engineer=2", "--seed", "1", "--config", str(tmp_path / "c.yaml"), "--quiet"])
    assert code == 0
    nodes, status = read_nodes(run_dir), read_status(run_dir)
    seed = next(n for n in nodes if n.origin == "seed")
    assert seed.score_full < 0.4 and status["best_score"] >= seed.score_full + 0.3  # it learned
    assert seed.tokens_in == 0 and seed.metrics["task_model_tokens_in"] > 0  # the seed asked no proposer
    ran = [n for n in nodes if n.was_evaluated and RepeatData.peek(n).repeat_of is None]
    used = status["task_model"]
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:  # and the winners' test cases
        metrics = [n.metrics for n in ran] + [f.metrics for f in store.final_scores()]
    assert used["calls"] == sum(m["task_model_calls"] for m in metrics) > 0
    assert used["tokens_in"] == sum(m["task_model_tokens_in"] for m in metrics)
    assert f"task model    {used['calls']} calls" in status_text(status)
    assert status["speculative_released"] > 0  # speculation works over a task model's cases too
    child = next(n for n in ran if n.origin != "seed" and n.parent_id == seed.id)
    prompt = (run_dir / "nodes" / child.id / "prompt.md").read_text()
    assert FEEDBACK_HEADER in prompt and "[val-" in prompt  # the parent's failed cases, shown
    best = next(n for n in nodes if n.id == status["best_node"])
    assert (run_dir / "best" / "files" / "prompt.md").read_text() == best.code
    assert (run_dir / "nodes" / best.id / "files" / "prompt.md").read_text() == best.code
    client = MlflowClient(f"sqlite:///{(ws / 'mlflow.db').resolve()}")
    with mlflow.tracking._tracking_service.utils._use_tracking_uri(client.tracking_uri):
        runs = mlflow.search_runs(experiment_names=["evoforge/house_style"], output_format="list",
                                  filter_string=f"tags.node_id = '{seed.id}'")
    assert runs[0].data.metrics["task_model_calls"] == seed.metrics["task_model_calls"] == 40
