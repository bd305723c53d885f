"""LLM faults against the simulator: retries, answer faults recorded on nodes, and the circuit
breaker that pauses a run while the server is down, resumes it, or gives up in one line."""

from __future__ import annotations

import argparse
import asyncio
import math
from pathlib import Path

import pytest

from evoforge.flows.cli import LLM_DOWN, main
from evoforge.flows.commands import status_text
from evoforge.infra.config import CircuitConfig
from evoforge.infra.llm.circuit import CLOSED, OPEN, Circuit, LLMOutage
from evoforge.infra.llm.openai_backend import LLMAnswerError, OpenAIBackend
from evoforge.infra.llm.types import LLMError
from evoforge.infra.llm_sim.cli_args import add_arguments, config_from_args
from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess
from evoforge.infra.llm_sim.server import ERROR_KINDS
from evoforge.infra.nodes import FAILED
from tests.helpers import read_nodes, read_status

# every chat request a research call (no analysis, repair or cognition), fast timeouts and probes
CONFIG = """\
llm:
  timeout_s: 1
  max_retries: 3
  backoff_s: 0.05
  max_answer_chars: 200000
  circuit: {failures: %(failures)d, probe_s: 0.2, give_up_s: %(give_up)s}
analyze: {enabled: false}
guard: {repair_attempts: 0}
cognition: {enabled: false}
"""
ANSWER_REASONS = {  # answer fault -> what its failed node says
    "truncated": "cut off at max_tokens",
    "bad_json": "not a chat completion",
    "huge": "over llm.max_answer_chars",
    "malformed": "unusable answer",
}
OUTAGE_WORDS = ("HTTP 429", "HTTP 500", "HTTP 503", "llm.timeout_s", "failed after", "LLMOutage")
MESSAGES = [{"role": "user", "content": "hello"}]


def _run(tmp_path: Path, sim: SimulatorProcess, evals: int = 12, failures: int = 3,
         give_up: float = 30.0, *extra: str) -> tuple[int, Path]:
    config = tmp_path / "faults.yaml"
    config.write_text(CONFIG % {"failures": failures, "give_up": give_up})
    run_dir = tmp_path / "run"
    code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                 "--max-evals", str(evals), "--seed", "3", "--quiet", "--no-mlflow", "--no-prefect-tasks",
                 "--llm-base-url", sim.base_url, "--config", str(config), *extra])
    return code, run_dir


def _outage_failures(run_dir: Path) -> list[str]:
    """The reasons of failed nodes that name the server being down rather than the answer."""
    return [n.error or "" for n in read_nodes(run_dir)
            if n.status == FAILED and any(w in (n.error or "") for w in OUTAGE_WORDS)]


@pytest.mark.slow
def test_every_fault_kind_is_retried_or_recorded_and_the_run_completes_its_budget(tmp_path):
    sim_cfg = SimConfig(median_s=0.02, sigma=0.2, slots=4, seed=29, error_rate=0.5,
                        error_kinds=ERROR_KINDS, hang_s=30)
    with SimulatorProcess(sim_cfg) as sim:
        # seed 29: all eight kinds among the first 21 requests; random faults must not open the circuit
        code, run_dir = _run(tmp_path, sim, failures=20)
        injected = sim.stats()["errors"]
    assert code == 0
    status = read_status(run_dir)
    assert status["evaluations"] == 12
    assert status["llm_pauses"] == 0
    assert set(ANSWER_REASONS) | {"429", "500", "hang"} <= set(injected), injected
    failed = [n for n in read_nodes(run_dir) if n.failed_stage == "research"]
    assert all(n.status == FAILED and n.error for n in failed)
    for kind, reason in ANSWER_REASONS.items():  # one failed node per injected answer fault
        recorded = sum(reason in (n.error or "") for n in failed)
        if kind == "truncated":  # retried once with more room: a failed node took two cut-off answers
            assert 2 * recorded <= injected[kind], kind
            continue
        assert recorded >= injected[kind] if kind == "malformed" else recorded == injected[kind], kind
    assert _outage_failures(run_dir) == []  # 429, 500 and hangs were retried away


@pytest.mark.slow
def test_an_outage_pauses_the_run_fails_no_node_and_the_run_resumes(tmp_path):
    sim_cfg = SimConfig(median_s=0.02, sigma=0.2, slots=4, seed=5, down_after=8, down_for=2.0)
    with SimulatorProcess(sim_cfg) as sim:
        code, run_dir = _run(tmp_path, sim)
        stats = sim.stats()
    assert code == 0
    status = read_status(run_dir)
    assert status["evaluations"] == 12
    assert status["llm_pauses"] >= 1 and status["llm_paused_s"] > 0
    assert status["llm_circuit"] == CLOSED
    assert f"llm circuit   closed, {status['llm_pauses']} pauses" in status_text(status)
    assert stats["outages"] == 1 and stats["errors"]["down"] >= 3
    assert stats["completed"] > 8  # answers after the outage: the run went on
    assert status["failed_research"] == 0 and _outage_failures(run_dir) == []  # no node paid for it


@pytest.mark.slow
def test_a_permanent_outage_stops_in_one_line_and_the_folder_resumes(tmp_path, capsys):
    sim_cfg = SimConfig(median_s=0.02, sigma=0.2, slots=4, seed=5, down_after=6, down_for=math.inf)
    with SimulatorProcess(sim_cfg) as sim:
        code, run_dir = _run(tmp_path, sim, give_up=2.0)
        err = capsys.readouterr().err
        status = read_status(run_dir)
        assert code == LLM_DOWN
        errors = [line for line in err.splitlines() if line.startswith("evoforge: error:")]
        assert len(errors) == 1 and "has not answered for 2 s" in errors[0], err
        assert "llm.circuit.give_up_s" in errors[0] and "Traceback" not in err
        assert status["state"] == "failed" and status["llm_pauses"] >= 1
        assert status["evaluations"] < 12 and _outage_failures(run_dir) == []
        sim.outage(0)  # the server is back: the same command resumes the run
        code, run_dir = _run(tmp_path, sim, give_up=2.0)
    assert code == 0
    assert read_status(run_dir)["evaluations"] == 12
    assert _outage_failures(run_dir) == []


@pytest.mark.slow
def test_a_router_sends_the_calls_to_the_endpoint_that_answers(tmp_path):
    up, down = SimConfig(median_s=0.02, seed=1), SimConfig(median_s=0.02, seed=2, down_after=2,
                                                           down_for=math.inf)
    with SimulatorProcess(up) as good, SimulatorProcess(down) as bad:
        config = tmp_path / "router.yaml"
        config.write_text((CONFIG % {"failures": 3, "give_up": 120.0}).replace(  # a loaded CI: room
            "llm:\n", f"llm:\n  endpoints:\n    - {{base_url: {good.base_url}}}\n"
                       f"    - {{base_url: {bad.base_url}}}\n", 1))
        run_dir = tmp_path / "run"
        code = main(["run", "circle_packing", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                     "--max-evals", "8", "--seed", "3", "--quiet", "--no-mlflow", "--no-prefect-tasks",
                     "--config", str(config)])
        down_answers = bad.stats()["errors"].get("down", 0)
    assert code == 0
    status = read_status(run_dir)
    assert status["evaluations"] == 8
    assert down_answers >= 3 and status["llm_circuit_opened"] >= 1
    assert status["llm_pauses"] == 0  # one endpoint down of two: the run never paused
    assert _outage_failures(run_dir) == []


# --- the backend and the circuit on their own (no run) ------------------------------------------
def _backend(sim: SimulatorProcess, **circuit: float) -> OpenAIBackend:
    settings = {"failures": 3, "probe_s": 0.1, "give_up_s": 5.0, **circuit}
    return OpenAIBackend(sim.base_url, None, timeout_s=1, max_retries=2, backoff_s=0.01,
                         max_answer_chars=100_000, circuit=CircuitConfig(**settings))


async def _ask(backend: OpenAIBackend, messages: list[dict[str, str]] = MESSAGES):
    try:
        return await backend.complete(messages, temperature=0.5, max_tokens=200)
    finally:
        await backend.close()


@pytest.mark.parametrize(("kind", "error", "reason", "requests"), [
    ("truncated", LLMAnswerError, "finish_reason 'length'", 2),  # asked once more, with more room
    ("bad_json", LLMAnswerError, "not a chat completion", 1),
    ("huge", LLMAnswerError, "dropped unread", 1),
])
def test_an_unusable_answer_is_an_answer_error_at_once(kind, error, reason, requests):
    with SimulatorProcess(SimConfig(median_s=0.01, error_rate=1.0, error_kinds=(kind,))) as sim:
        backend = _backend(sim)
        with pytest.raises(error, match=reason):
            asyncio.run(_ask(backend))
        assert sim.stats()["requests"] == requests  # not retried (a cut-off answer: once)
    assert backend.circuit.state == CLOSED and backend.circuit.opened == 0


def test_a_rejected_request_fails_at_once_and_leaves_the_circuit_closed():
    with SimulatorProcess(SimConfig(median_s=0.01)) as sim:
        backend = _backend(sim)
        with pytest.raises(LLMError, match=r"rejected: BadRequestError \(HTTP 400\)"):
            asyncio.run(_ask(backend, messages=[]))  # no messages: a 400
        assert sim.stats()["requests"] == 1
    assert backend.circuit.state == CLOSED and backend.circuit.opened == 0


def test_a_hang_is_cut_at_the_timeout_and_retried():
    sim_cfg = SimConfig(median_s=0.01, error_rate=0.5, error_kinds=("hang",), hang_s=60, seed=1)
    with SimulatorProcess(sim_cfg) as sim:  # seed 1: the first request hangs, the second answers
        completion = asyncio.run(_ask(_backend(sim)))
        assert sim.stats()["errors"]["hang"] == 1
    assert completion.attempts == 2 and completion.text


def test_a_server_down_for_good_ends_the_call_with_an_outage():
    with SimulatorProcess(SimConfig(median_s=0.01, down_after=0, down_for=math.inf)) as sim:
        backend = _backend(sim, give_up_s=0.5)
        with pytest.raises(LLMOutage, match="has not answered for 0.5 s"):
            asyncio.run(_ask(backend))
    assert backend.circuit.opened == 1 and backend.circuit.probes >= 1 and backend.circuit.gave_up


def test_a_call_waits_out_a_short_outage_and_gets_its_answer():
    with SimulatorProcess(SimConfig(median_s=0.01, down_after=0, down_for=1.0)) as sim:
        backend = _backend(sim)
        completion = asyncio.run(_ask(backend))
        assert sim.stats()["errors"]["down"] >= 3
    assert completion.text and backend.circuit.state == CLOSED
    assert backend.circuit.opened == 1 and backend.circuit.down_s > 0


def test_a_request_the_server_keeps_failing_is_the_nodes_not_an_outage():
    """A probe answered while this call kept failing: the server is up, the call fails alone."""
    async def answers() -> str | None:
        return None

    async def scenario() -> tuple[bool, str]:
        circuit = Circuit("x", answers, failures=2, probe_s=0.01, give_up_s=5)
        sent = circuit.now()
        circuit.failure("InternalServerError (HTTP 500)")
        circuit.failure("InternalServerError (HTTP 500)")
        assert circuit.state == OPEN
        await circuit.wait_closed()  # the probe answered
        up = await circuit.answered_since(sent, within=0.1)
        await circuit.close()
        return up, circuit.state

    assert asyncio.run(scenario()) == (True, CLOSED)


def test_the_simulator_takes_its_fault_options_from_the_command_line():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config, _, _ = config_from_args(parser.parse_args(
        ["--error-kinds", "truncated,cut,bad_json,huge", "--huge-chars", "5000",
         "--down-after", "3", "--down-for", "inf"]))
    assert config == SimConfig(error_kinds=("truncated", "cut", "bad_json", "huge"), huge_chars=5000,
                               down_after=3, down_for=math.inf)
    with pytest.raises(ValueError, match="down-for must be more than 0"):
        config_from_args(parser.parse_args(["--down-after", "3", "--down-for", "0"]))


@pytest.mark.slow
def test_a_task_model_on_its_own_endpoint_that_goes_down_pauses_the_run_and_fails_no_case(tmp_path):
    # the proposer answers throughout; the task model's server (task_model.llm) is down for 2 s
    proposer = SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=3)
    model = SimConfig(median_s=0.01, sigma=0.2, slots=16, seed=4, down_after=60, down_for=2.0)
    with SimulatorProcess(proposer) as sim, SimulatorProcess(model) as task_llm:
        config = tmp_path / "c.yaml"
        config.write_text((CONFIG % {"failures": 3, "give_up": 120.0})
                          + f"task_model:\n  llm: {{base_url: {task_llm.base_url}}}\n")
        run_dir = tmp_path / "run"
        code = main(["run", "house_style", "--run-dir", str(run_dir), "--workspace", str(tmp_path / "ws"),
                     "--max-evals", "8", "--seed", "3", "--quiet", "--no-mlflow", "--config", str(config),
                     "--llm-base-url", sim.base_url])
        stats = task_llm.stats()
    assert code == 0
    status = read_status(run_dir)
    assert stats["outages"] == 1 and stats["errors"]["down"] >= 3  # the task model was down, and asked
    assert status["llm_pauses"] >= 1 and status["llm_paused_s"] > 0 and status["llm_circuit"] == CLOSED
    assert status["evaluations"] == 8 and status["task_model"]["failed"] == 0  # no case blamed for it
    assert all("task model call failed" not in (n.error or "") for n in read_nodes(run_dir))
