"""Timeouts that follow an endpoint's measured pace, and a busy endpoint told apart from a down one.

A slow model is waited for as long as its pace says (beyond llm.timeout_s), calls queued at a
server that serves one request at a time get the time of the calls ahead of them, a hung server
is cut at its predicted bound (reason `timeout`, the message naming the bound and why), and an
endpoint that answers its cheap probe but not its calls is busy (the run goes on, the progress
line says `LLM busy`), while one that answers nothing is down (the circuit opens)."""

from __future__ import annotations

import asyncio

import pytest

from evoforge.flows.progress import progress_parts
from evoforge.infra import failure_reasons
from evoforge.infra.config import CircuitConfig
from evoforge.infra.llm.circuit import CLOSED, OPEN, Breakers, Circuit, LLMOutage
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm.pace import Pace
from evoforge.infra.llm.types import LLMError
from tests.llm_fake_server import MODEL, FakeServer, Reply, answers

MESSAGES = [{"role": "user", "content": "hello"}]
STATUS = {"evaluations": 1, "best_score": None, "candidates_per_min": 0.0, "nodes_failed": 0,
          "tokens_in": 0, "tokens_out": 0}


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _smollm2_pace(pace: Pace, calls: int = 6) -> None:
    """What a slow CPU model shows: 0.5 s overhead, prefill 400 tokens/s, generation 60 tokens/s."""
    for i in range(calls):
        prompt, completion = 400 * (1 + i % 3), 60 * (1 + i % 4)
        pace.observe(prompt, completion, 0.5 + prompt / 400 + completion / 60)


def test_the_fit_recovers_prefill_and_generation_speeds_and_ignores_an_outlier() -> None:
    pace = Pace()
    _smollm2_pace(pace, calls=12)
    pace.observe(400, 60, 500.0)  # one call that sat behind something else
    rates = pace.rates()
    assert rates["prefill_tps"] == pytest.approx(400, rel=0.05)
    assert rates["generation_tps"] == pytest.approx(60, rel=0.05)
    assert rates["overhead_s"] == pytest.approx(0.5, abs=0.05)


def test_before_a_few_calls_the_timeout_is_llm_timeout_s_then_three_times_the_prediction() -> None:
    pace = Pace(min_calls=3)
    assert pace.bound(1000, 512, floor_s=120).seconds == 120
    _smollm2_pace(pace, calls=2)
    assert pace.bound(1000, 512, floor_s=120).seconds == 120  # two calls: not measured yet
    _smollm2_pace(pace, calls=6)
    predicted = 0.5 + 2000 / 400 + 4096 / 60
    bound = pace.bound(2000, 4096, floor_s=120)
    assert bound.seconds == pytest.approx(3 * predicted, rel=0.02) and bound.seconds > 120
    assert bound.why.startswith(f"3x the {predicted:.1f} s this endpoint's pace predicts")
    assert pace.bound(100, 16, floor_s=120).seconds == 120  # a short call: the floor


def test_calls_queued_at_a_one_slot_server_add_their_predicted_time() -> None:
    pace = Pace()
    _smollm2_pace(pace)
    alone = pace.bound(400, 512, floor_s=1).seconds
    for _ in range(7):
        pace.sent(400, 512)
    assert pace.bound(400, 512, floor_s=1).seconds == alone  # slots unknown: nothing added
    pace.slots = 1
    queued = pace.bound(400, 512, floor_s=1)
    typical = sum(60 * (1 + i % 4) for i in range(6)) / 6
    ahead = 7 * (0.5 + 1 + typical / 60)  # seven calls of the typical answer length
    assert queued.seconds == pytest.approx(alone + 3 * ahead, rel=0.02)
    assert "for the 7 calls ahead" in queued.why
    pace.slots = 8
    assert pace.bound(400, 512, floor_s=1).seconds == alone  # eight slots: none waits


def test_before_its_pace_is_measured_a_call_queued_at_a_one_slot_server_waits_a_timeout_per_round() -> None:
    pace = Pace()
    assert pace.bound(400, 512, floor_s=120).seconds == 120
    for _ in range(7):
        pace.sent(400, 512)
    assert pace.bound(400, 512, floor_s=120).seconds == 120  # slots unknown: the floor
    pace.slots = 1
    queued = pace.bound(400, 512, floor_s=120)  # the 8th of 8 research calls, one served at a time
    assert queued.seconds == 120 * 8 and "7 rounds of calls queued ahead" in queued.why
    pace.slots = 4
    assert pace.bound(400, 512, floor_s=120).seconds == 120 * 2


def test_a_queued_call_is_measured_from_when_its_slot_freed() -> None:
    clock = Clock()
    pace = Pace(min_calls=1, clock=clock)
    pace.slots = 1
    first, second = pace.sent(100, 50), pace.sent(100, 50)  # sent together, served one after the other
    clock.now = 10.0
    pace.answered(first, 100, 50)
    clock.now = 20.0
    pace.answered(second, 100, 50)
    assert pace.predict(100, 50) == pytest.approx(10.0)  # not the 20 s the second call waited


def _backend(server: FakeServer, timeout_s: float, **circuit: float) -> OpenAIBackend:
    breaker = CircuitConfig(**{"failures": 5, "probe_s": 0.05, "give_up_s": 2.0, **circuit})
    return OpenAIBackend(server.base_url, MODEL, timeout_s=timeout_s, max_retries=0, backoff_s=0.01,
                         circuit=breaker)


def _measured(backend: OpenAIBackend, seconds: float) -> None:
    """The endpoint was measured at `seconds` a call (prompt and answer alike)."""
    for prompt, completion in [(10, 5), (20, 5), (10, 10), (20, 10)]:
        backend.pace.observe(prompt, completion, seconds)


def _ask(backend: OpenAIBackend) -> object:
    async def ask() -> object:
        try:
            return await backend.complete(MESSAGES, temperature=0.0, max_tokens=8)
        except (LLMError, LLMOutage) as exc:
            return exc
        finally:
            await backend.close()

    return asyncio.run(ask())


def test_a_slow_endpoint_is_waited_for_past_llm_timeout_s_once_its_pace_is_known() -> None:
    with FakeServer(answers(Reply(delay_s=0.6), Reply(delay_s=0.6))) as server:
        cold = _backend(server, timeout_s=0.2)
        assert isinstance(_ask(cold), LLMError)  # unmeasured: cut at llm.timeout_s
        warm = _backend(server, timeout_s=0.2)
        _measured(warm, 1.0)  # it was seen taking a second a call
        completion = _ask(warm)
    assert not isinstance(completion, Exception), completion
    assert completion.text == "ok" and completion.attempts == 1


def test_a_hung_endpoint_is_cut_at_its_predicted_bound_and_reported_busy_when_it_answers_its_probe() -> None:
    with FakeServer(answers(Reply(hang=True))) as server:
        backend = _backend(server, timeout_s=0.05)
        _measured(backend, 0.1)
        outcome = _ask(backend)
        assert "/v1/models" in server.paths()  # the probe: a GET, not a chat request behind the queue
        assert len(server.chats) == 1
    assert isinstance(outcome, LLMError) and outcome.reason == failure_reasons.TIMEOUT
    assert "no answer within 0.3 s (3x the 0.1 s this endpoint's pace predicts)" in str(outcome)
    assert "busy, not down" in str(outcome)
    circuit = backend.circuit
    assert circuit.state == CLOSED and circuit.busy and circuit.opened == 0
    gauges = Breakers([circuit]).gauges()
    assert gauges["llm_state"] == "busy" and not gauges["llm_paused"]
    line = progress_parts({**STATUS, **gauges}, 10)
    assert any(p.startswith("LLM busy: no answer within 0.3 s") for p in line), line
    assert not any("LLM down" in p for p in line)


def test_a_server_that_answers_nothing_is_down_and_not_waited_for_forever() -> None:
    with FakeServer(answers(Reply(hang=True)), hang_gets=True) as server:
        backend = _backend(server, timeout_s=0.05, give_up_s=0.5)
        _measured(backend, 0.1)
        outcome = _ask(backend)
    assert isinstance(outcome, LLMOutage)  # the circuit opened and gave up: the run stops, resumable
    assert backend.circuit.opened == 1 and not backend.circuit.busy
    assert "no answer to GET health within 0.05 s" in backend.circuit.last_error  # nor to GET models


def test_timeouts_in_a_row_probe_before_opening_the_circuit() -> None:
    async def scenario(probe_answer: str | None) -> Circuit:
        async def probe() -> str | None:
            return probe_answer

        circuit = Circuit("http://llm/v1", probe, failures=2, probe_s=0.01, give_up_s=1.0)
        for _ in range(2):
            circuit.failure("no answer within 3 s", timed_out=True)
        await asyncio.sleep(0.05)  # the check runs
        state = circuit.state
        await circuit.close()
        circuit.state = state
        return circuit

    busy = asyncio.run(scenario(None))
    assert busy.state == CLOSED and busy.busy and busy.opened == 0
    down = asyncio.run(scenario("ConnectError on GET models"))
    assert down.state == OPEN and not down.busy and down.opened == 1
    gauges = Breakers([down]).gauges()
    assert gauges["llm_state"] == "down" and gauges["llm_paused"]
    assert any(p.startswith("LLM down: paused") for p in progress_parts({**STATUS, **gauges}, 10))


def test_an_answer_ends_the_busy_spell() -> None:
    async def up() -> str | None:
        return None

    async def scenario() -> Circuit:
        circuit = Circuit("http://llm/v1", up, failures=1)
        assert not await circuit.down_or_busy("no answer within 3 s", timed_out=True)
        assert circuit.busy
        circuit.answered(circuit.now())
        return circuit

    circuit = asyncio.run(scenario())
    assert not circuit.busy and Breakers([circuit]).gauges()["llm_state"] == "up"
