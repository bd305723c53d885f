"""A sandboxed evaluation's link to the task model (task.yaml `task_model: true`): calls from the
child answered by the run's client, counted exactly, held to the money budget, a hung or failed
call an error back to the child; no key and no network in the child; bad task folders one line."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from evoforge.evaluators.evaluation import EvalOutcome, evaluate_program
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import TaskError, load_task
from evoforge.evaluators.task_model_client import TaskModelClient, attach_channel
from evoforge.infra.llm.types import Completion, LLMError
from evoforge.stages.population.repeat_data import RepeatData

PROGRAM = "# EVOLVE-BLOCK-START\nX = 1\n# EVOLVE-BLOCK-END\n"
# asks the task model for each word of WORDS in order; "fail" fails on the model's side
CALLER = '''
import json
from evoforge_channel import TaskModelError, llm

WORDS = {words!r}

def evaluate(program_path):
    answers, errors = [], []
    for word in WORDS:
        try:
            answers.append(llm([{{"role": "user", "content": word}}], timeout_s={timeout!r}))
        except TaskModelError as exc:
            errors.append(str(exc))
    return {{"combined_score": float(len(answers)), "answers": json.dumps(answers),
            "errors": json.dumps(errors)}}
'''


class Echo:
    """A stand-in task model: answers a word in capitals, fails on "fail", never answers "hang"."""

    model, name = "echo", "test"

    def __init__(self) -> None:
        self.calls = 0
        self.max_tokens: list[int] = []  # what each call was sent with

    async def complete(self, messages, *, temperature, max_tokens):
        self.calls += 1
        self.max_tokens.append(max_tokens)
        word = messages[-1]["content"]
        if word == "fail":
            raise LLMError("HTTP 500 from the server")
        if word == "hang":
            await asyncio.Event().wait()
        return Completion(text=word.upper(), model=self.model, backend=self.name, tokens_in=5, tokens_out=1,
                          seconds=0.001)

    async def close(self) -> None:
        return None


def _task(tmp_path: Path, evaluator: str, yaml: str = "task_model: true\ntimeout_s: 20\n") -> Path:
    root = tmp_path / "caller"
    root.mkdir(parents=True, exist_ok=True)
    (root / "initial_program.py").write_text(PROGRAM)
    (root / "evaluator.py").write_text(evaluator)
    (root / "task.yaml").write_text(yaml)
    return root


def _evaluate(root: Path | str, backend, *, warm: bool = True, timeout_s: float = 20.0, prices=None,
              **bounds: int) -> tuple[EvalOutcome, TaskModelClient]:
    task = load_task(root)
    client = TaskModelClient(backend, concurrency=4, temperature=0.0, prices=prices or {},
                             **{"max_tokens": 256, **bounds})
    attach_channel(task, client)
    limits = SandboxLimits(timeout_s=timeout_s, warm=warm)

    async def run() -> EvalOutcome:
        try:
            return await evaluate_program(task, task.initial_code, limits=limits)
        finally:
            await backend.close()  # on the loop its connections belong to

    return asyncio.run(run()), client


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_calls_from_the_sandbox_are_answered_and_counted_exactly(tmp_path: Path, warm: bool) -> None:
    backend = Echo()
    root = _task(tmp_path, CALLER.format(words=["alpha", "beta", "fail", "gamma"], timeout=None))
    outcome, client = _evaluate(root, backend, warm=warm)
    assert outcome.ok and outcome.score == 3.0, outcome.error or outcome.stderr_tail
    assert json.loads(outcome.artifacts["answers"]) == ["ALPHA", "BETA", "GAMMA"]
    assert json.loads(outcome.artifacts["errors"]) == ["task model call failed: HTTP 500 from the server"]
    assert backend.calls == 4
    assert (outcome.metrics["task_model_calls"], outcome.metrics["task_model_failed"]) == (3.0, 1.0)
    assert outcome.metrics["task_model_tokens_in"] == 15.0
    assert (client.usage.calls, client.usage.failed, client.usage.tokens_in) == (3, 1, 15)  # the run's


def test_a_call_asking_for_more_than_task_model_max_tokens_is_clamped_to_it(tmp_path: Path) -> None:
    second = '    answers.append(llm([{"role": "user", "content": "beta"}], max_tokens=16))\n'
    evaluator = CALLER.format(words=["alpha"], timeout=None).replace(
        'timeout_s=None)', 'timeout_s=None, max_tokens=65536)')
    evaluator = evaluator.replace("    return {", second + "    return {")
    backend = Echo()
    outcome, client = _evaluate(_task(tmp_path, evaluator), backend, max_tokens=64)
    assert outcome.ok, outcome.error or outcome.stderr_tail
    assert json.loads(outcome.artifacts["answers"]) == ["ALPHA", "BETA"]
    assert backend.max_tokens == [64, 16]  # 65,536 asked, task_model.max_tokens sent; less is kept


def test_calls_beyond_max_calls_per_eval_are_refused_unsent_and_counted_on_the_node(tmp_path: Path) -> None:
    backend = Echo()
    root = _task(tmp_path, CALLER.format(words=["alpha", "beta", "gamma", "delta", "omega"], timeout=None))
    outcome, client = _evaluate(root, backend, max_calls_per_eval=2)
    assert outcome.ok and outcome.score == 2.0, outcome.error or outcome.stderr_tail
    assert json.loads(outcome.artifacts["answers"]) == ["ALPHA", "BETA"]
    errors = json.loads(outcome.artifacts["errors"])
    assert errors == ["task model call refused: this evaluation has made its 2 calls "
                      "(task_model.max_calls_per_eval): not sent"] * 3
    assert backend.calls == 2  # the refused ones never reached the model
    assert (outcome.metrics["task_model_calls"], outcome.metrics["task_model_refused"],
            outcome.metrics["task_model_failed"]) == (2.0, 3.0, 3.0)
    assert (client.usage.calls, client.usage.refused) == (2, 3)  # the run's
    again, _ = _evaluate(root, backend, max_calls_per_eval=2)  # the budget is per evaluation
    assert again.metrics["task_model_calls"] == 2.0


def test_the_default_call_budget_holds_the_built_in_harness_classify_task() -> None:
    from evoforge.infra.config import TaskModelConfig

    outcome, _ = _evaluate("harness_classify", Echo(), timeout_s=60.0)
    assert outcome.ok, outcome.error or outcome.stderr_tail
    assert outcome.metrics["task_model_calls"] == 24 and outcome.metrics["task_model_refused"] == 0
    assert TaskModelConfig().max_calls_per_eval >= 4 * 24  # room for harnesses that ask several times


def test_a_hung_call_is_an_error_back_to_the_candidate_and_the_evaluation_goes_on(tmp_path: Path) -> None:
    """A call given up at the caller's timeout_s, one without at 90% of the evaluation's timeout."""
    evaluator = CALLER.format(words=["hang", "alpha"], timeout=0.3) + '''
def second(program_path):
    try:
        llm([{"role": "user", "content": "hang"}])
    except TaskModelError as exc:
        return {"combined_score": 1.0, "errors": str(exc)}
'''
    outcome, client = _evaluate(_task(tmp_path, evaluator), Echo())
    assert outcome.ok and outcome.score == 1.0
    (error,) = json.loads(outcome.artifacts["errors"])
    assert error == "task model call not answered within its timeout_s (0.3 s)"
    assert (client.usage.calls, client.usage.failed) == (1, 1)
    root = _task(tmp_path, evaluator.replace("def evaluate(", "def first(").replace("def second(",
                                                                                   "def evaluate("))
    outcome, _ = _evaluate(root, Echo(), timeout_s=2.0)
    assert outcome.ok and outcome.artifacts["errors"] == ("task model call not answered before the "
                                                          "evaluation's deadline (90% of its 2 s timeout)")


def test_a_malformed_request_gets_an_error_line_and_the_link_stays_up(tmp_path: Path) -> None:
    evaluator = '''
import json, os, socket
from evoforge_channel import llm

def evaluate(program_path):
    link = socket.socket(fileno=os.dup(int(os.environ["EVOFORGE_TASK_MODEL_FD"])))
    link.sendall(b'{"id": 7, "messages": "hello"}\\n')
    reply = json.loads(link.makefile("rb").readline())
    link.detach()
    after = llm([{"role": "user", "content": "ok"}])
    return {"combined_score": 1.0, "reply": json.dumps(reply), "after": after}
'''
    outcome, client = _evaluate(_task(tmp_path, evaluator), Echo())
    assert outcome.ok, outcome.error
    reply = json.loads(outcome.artifacts["reply"])
    assert reply["id"] == 7 and reply["error"].startswith("malformed task model request: 'messages' must be")
    assert outcome.artifacts["after"] == "OK" and (client.usage.calls, client.usage.failed) == (1, 1)


def test_a_request_over_the_line_limit_closes_the_link_and_later_calls_fail_at_once(tmp_path: Path) -> None:
    evaluator = '''
import os, socket, time
from evoforge_channel import TaskModelError, llm

def evaluate(program_path):
    link = socket.socket(fileno=os.dup(int(os.environ["EVOFORGE_TASK_MODEL_FD"])))
    try:
        link.sendall(b"x" * (5 * 2**20))
    except OSError:
        pass
    start = time.monotonic()
    try:
        llm([{"role": "user", "content": "ok"}])
        error = ""
    except TaskModelError as exc:
        error = str(exc)
    return {"combined_score": 1.0, "error": error, "waited_s": time.monotonic() - start}
'''
    outcome, client = _evaluate(_task(tmp_path, evaluator), Echo())
    assert outcome.ok, outcome.error
    assert outcome.artifacts["error"].startswith("the link to the task model is closed")
    assert outcome.metrics["waited_s"] < 5 and client.usage.calls == 0


def test_without_a_task_model_in_the_process_a_call_raises_in_the_child(tmp_path: Path) -> None:
    task = load_task(_task(tmp_path / "alone", CALLER.format(words=["alpha"], timeout=None)))
    outcome = asyncio.run(evaluate_program(task, task.initial_code, limits=SandboxLimits(timeout_s=20)))
    assert outcome.ok and "task_model_calls" not in outcome.metrics
    (error,) = json.loads(outcome.artifacts["errors"])
    assert error.startswith("no link to a task model in this evaluation")


def test_a_task_without_task_model_gets_no_link_even_with_a_client_attached(tmp_path: Path) -> None:
    root = _task(tmp_path, CALLER.format(words=["alpha"], timeout=None), yaml="timeout_s: 20\n")
    outcome, client = _evaluate(root, Echo())
    assert json.loads(outcome.artifacts["errors"])[0].startswith("no link to a task model")
    assert client.usage.calls == 0 and "task_model_calls" not in outcome.metrics


def test_the_budget_cap_refuses_calls_beyond_it_before_they_are_sent(tmp_path: Path) -> None:
    """Through the real client and the simulator: the cap is the first call's worst case (256 tokens
    out), so it goes and spends a little; the four after it no longer fit and are refused in this
    process (the simulator never sees them) and the child gets the reason."""
    from evoforge.infra.config import ModelPrice
    from evoforge.infra.llm.openai_backend import OpenAIBackend
    from evoforge.infra.llm.spending import Spending
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess

    prices = {"evoforge-sim": ModelPrice(input_per_mtok=0.0, output_per_mtok=1000.0)}
    spending = Spending(0.256, prices)  # a call's worst case: 256 tokens out, $0.256
    root = _task(tmp_path, CALLER.format(words=["What is 2 + 2?"] * 5, timeout=None))
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.1, slots=4, seed=1)) as sim:
        backend = OpenAIBackend(sim.base_url, "evoforge-sim", spending=spending)
        outcome, client = _evaluate(root, backend, prices=prices)
        sent = sim.stats()["completed"]
    assert outcome.ok and outcome.score == 1.0
    errors = json.loads(outcome.artifacts["errors"])
    assert len(errors) == 4 and all("budget.max_cost_usd reached" in e and "not sent" in e for e in errors)
    assert sent == 1 and (client.usage.calls, client.usage.failed) == (1, 4)
    assert spending.exhausted and client.usage.cost_usd == pytest.approx(spending.spent_usd)
    assert 0 < spending.spent_usd <= 0.256  # the call sent was charged; the cap was not crossed


def test_the_link_names_its_descriptor_the_same_everywhere() -> None:
    import importlib.util

    from evoforge.evaluators import forkserver, launch
    from evoforge.evaluators.fork_client import COMPAT_DIR

    spec = importlib.util.spec_from_file_location("channel", COMPAT_DIR / "evoforge_channel.py")
    assert spec is not None and spec.loader is not None
    channel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(channel)
    assert channel.FD_ENV == launch.TASK_MODEL_FD_ENV == forkserver.TASK_MODEL_FD_ENV
    assert forkserver.TASK_MODEL_FD == forkserver.RESULT_FD + 1


@pytest.mark.parametrize(("yaml", "message"), [
    ("task_model: yes please\n", "task.yaml: task_model must be true or false, got 'yes please'"),
    ("task_model: 1\n", "task.yaml: task_model must be true or false, got 1"),
])
def test_a_malformed_task_model_key_is_one_line(tmp_path: Path, yaml: str, message: str) -> None:
    with pytest.raises(TaskError) as caught:
        load_task(_task(tmp_path, CALLER.format(words=[], timeout=None), yaml=yaml))
    assert str(caught.value) == message


def test_a_text_task_is_refused_the_task_model_key(tmp_path: Path) -> None:
    root = tmp_path / "text"
    root.mkdir()
    (root / "prompt.md").write_text("Answer.\n")
    (root / "evaluator.py").write_text("def cases(): ...\nasync def run(a, c, llm): ...\n"
                                       "def metric(c, o): ...\n")
    (root / "task.yaml").write_text("kind: text\nprompt: prompt.md\ntask_model: true\n")
    with pytest.raises(TaskError, match=r"^task.yaml: 'task_model' is for kinds program and files"):
        load_task(root)


def test_the_cli_refuses_a_malformed_key_and_a_task_model_task_without_an_llm(tmp_path: Path, capsys) -> None:
    from evoforge.flows.cli import main

    bad = _task(tmp_path, CALLER.format(words=[], timeout=None), yaml="task_model: maybe\n")
    code = main(["run", str(bad), "--workspace", str(tmp_path / "ws"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].endswith("task.yaml: task_model must be true or false, got 'maybe'")
    code = main(["run", "harness_classify", "--workspace", str(tmp_path / "ws"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].endswith("task 'harness_classify' declares task_model: true: its evaluations call a task "
                            "model (an LLM), and the offline proposer cannot answer them; set "
                            "--llm-base-url (or task_model.llm)")


@pytest.mark.slow
def test_a_run_counts_every_sandbox_call_and_the_child_has_no_key_and_no_network(tmp_path: Path,
                                                                                 monkeypatch) -> None:
    """A probe task over the simulator, the run's key in this process's environment: each
    evaluation makes exactly CALLS calls, status.json says so, the key reached the simulator (added
    outside), and inside the child there is no key and a TCP connect to the simulator fails."""
    import hashlib

    from evoforge.flows.cli import main
    from evoforge.flows.commands import status_text
    from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
    from tests.helpers import read_nodes, read_status

    canary, other = "sk-evoforge-canary-5d1e", "sk-evoforge-endpoint-key-9b2c"
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    monkeypatch.setenv("EVOFORGE_TEST_TASK_MODEL_KEY", other)  # a task_model.llm endpoint's api_key_env
    calls = 3
    probe = f'''
import os, socket
from evoforge_channel import llm

SECRETS = ({canary!r}, {other!r})

def evaluate(program_path):
    answers = [llm([{{"role": "user", "content": "What is 2 + 2?"}}]) for _ in range({calls})]
    seen = [k for k, v in os.environ.items() if any(s in v for s in SECRETS) or "KEY" in k.upper()]
    host, port = open("target.txt").read().split()
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        tcp = "connected"
    except OSError as exc:
        tcp = f"{{type(exc).__name__}}: {{exc}}"
    return {{"combined_score": 1.0, "answered": float(len(answers)), "secrets_seen": float(len(seen)),
            "tcp_ok": float(tcp == "connected"), "tcp": tcp, "answer": answers[0]}}
'''
    root = _task(tmp_path, probe, yaml="task_model: true\ntimeout_s: 20\n")
    (root / "initial_program.py").write_text("# EVOLVE-BLOCK-START\nX = 1.5\n# EVOLVE-BLOCK-END\n")
    run_dir, ws = tmp_path / "run", tmp_path / "ws"
    (tmp_path / "c.yaml").write_text("cognition: {enabled: false}\n")
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.1, slots=8, seed=2)) as sim:
        host, port = sim.base_url.split("//")[1].split("/")[0].split(":")
        (root / "target.txt").write_text(f"{host} {port}\n")
        code = main(["run", str(root), "--run-dir", str(run_dir), "--workspace", str(ws), "--llm-base-url",
                     sim.base_url, "--max-evals", "4", "--seed", "1", "--config", str(tmp_path / "c.yaml"),
                     "--quiet"])
        keys_seen = sim.stats()["api_key_sha256"]
    assert code == 0
    status = read_status(run_dir)
    ran = [n for n in read_nodes(run_dir) if n.was_evaluated and RepeatData.peek(n).repeat_of is None]
    assert ran and all(n.metrics["answered"] == calls for n in ran)
    used = status["task_model"]
    assert used["calls"] == calls * len(ran) == sum(n.metrics["task_model_calls"] for n in ran)
    assert status["task_model"]["failed"] == 0
    assert f"task model    {calls * len(ran)} calls" in status_text(status)
    assert hashlib.sha256(canary.encode()).hexdigest()[:16] in keys_seen  # the key, added outside
    for node in ran:
        assert node.metrics["secrets_seen"] == 0 and node.metrics["tcp_ok"] == 0
        assert "Network is unreachable" in node.artifacts["tcp"], node.artifacts["tcp"]
        assert node.artifacts["answer"].endswith("(simulated task model: evoforge llm-sim, no real LLM)")
    assert os.environ["OPENAI_API_KEY"] == canary  # the parent had it all along


def test_the_configured_call_budget_reaches_the_run_s_task_model_client():
    from evoforge.flows.prepare import open_task_model
    from evoforge.infra.config import RunConfig
    from evoforge.infra.llm.openai_backend import OpenAIBackend
    from evoforge.infra.llm.spending import Spending

    task = load_task("harness_classify")
    cfg = RunConfig.model_validate({"task_model": {"max_calls_per_eval": 3, "max_tokens": 77}})
    backend = OpenAIBackend("http://127.0.0.1:9/v1", "m", spending=Spending(None, {}))
    client = open_task_model(task, cfg, backend, Spending(None, {}))
    assert (client.max_calls_per_eval, client.max_tokens) == (3, 77)
