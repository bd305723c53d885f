"""The LLM scheduler: one set of slots per endpoint, handed to the most urgent waiting call
(proposals, then reflections, analyses, plans, judge, queries), with ranks, ageing, refusable
calls and a load report; the wrapper keeps the backend's own attributes and is installed on the run."""

from __future__ import annotations

import asyncio

import pytest

from evoforge.infra.config import RunConfig
from evoforge.infra.llm.factory import circuits_of, scheduled
from evoforge.infra.llm.scheduler import (
    ANALYZE,
    JUDGE,
    PLAN,
    PROPOSE,
    QUERY,
    REFLECT,
    Ask,
    ScheduledBackend,
    Scheduler,
    SlotRefused,
    asking,
    scheduler_of,
    unscheduled,
)
from evoforge.infra.llm.types import Completion
from evoforge.infra.nodes import Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.stages.pipeline.llm_call import ask_llm


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Gated:
    """A backend whose calls each wait for the test to let them answer; it records their order."""

    name, model = "gated", "gated-model"

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.context_window = 4096
        self.closed = False

    async def complete(self, messages, *, temperature, max_tokens):
        tag = messages[-1]["content"]
        self.started.append(tag)
        gate = self.gates.setdefault(tag, asyncio.Event())
        await gate.wait()
        return Completion(f"answer to {tag}", self.model, "openai", 1, 1, 0.1)

    def observe(self, model, gain):
        return None

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    async def close(self):
        self.closed = True


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def _grant_order(scheduler: Scheduler, asks: list[tuple[str, Ask]]) -> list[str]:
    """Hold the only slot, queue `asks` in order, then release: the order they got the slot."""
    await scheduler.acquire(Ask(PROPOSE))
    order: list[str] = []

    async def one(tag: str, ask: Ask) -> None:
        await scheduler.acquire(ask)
        order.append(tag)
        scheduler.release()

    tasks = [asyncio.create_task(one(tag, ask)) for tag, ask in asks]
    await _settle()
    scheduler.release()
    await asyncio.gather(*tasks)
    return order


def test_a_waiting_higher_priority_call_takes_the_next_free_slot_first():
    asks = [("query", Ask(QUERY)), ("judge", Ask(JUDGE)), ("plan", Ask(PLAN)), ("analyze", Ask(ANALYZE)),
            ("reflect", Ask(REFLECT)), ("propose", Ask(PROPOSE))]
    order = asyncio.run(_grant_order(Scheduler(slots=1, aging_s=None), asks))
    assert order == ["propose", "reflect", "analyze", "plan", "judge", "query"]


def test_within_a_priority_the_better_rank_then_the_older_call_goes_first():
    asks = [("late-worse", Ask(ANALYZE, (3.0,))), ("first-best", Ask(ANALYZE, (0.0,))),
            ("second-best", Ask(ANALYZE, (0.0,))), ("middle", Ask(ANALYZE, (1.0, -0.5)))]
    order = asyncio.run(_grant_order(Scheduler(slots=1, aging_s=None), asks))
    assert order == ["first-best", "second-best", "middle", "late-worse"]


def test_a_call_waiting_long_moves_up_so_proposals_never_starve_it():
    clock = Clock()

    async def scenario() -> list[str]:
        scheduler = Scheduler(slots=1, aging_s=10.0, clock=clock)
        await scheduler.acquire(Ask(PROPOSE))
        order: list[str] = []

        async def one(tag: str, ask: Ask) -> None:
            await scheduler.acquire(ask)
            order.append(tag)
            scheduler.release()

        old = asyncio.create_task(one("old analysis", Ask(ANALYZE)))
        await _settle()
        clock.now = 25.0  # two ageing steps: ANALYZE (2) counts as PROPOSE (0) now
        new = asyncio.create_task(one("new proposal", Ask(REFLECT)))
        await _settle()
        scheduler.release()
        await asyncio.gather(old, new)
        return order

    assert asyncio.run(scenario()) == ["old analysis", "new proposal"]


def test_refusable_calls_beyond_keep_are_refused_worst_rank_first():
    async def scenario() -> tuple[list[str], list[str], int]:
        scheduler = Scheduler(slots=1, aging_s=None)
        await scheduler.acquire(Ask(PROPOSE))
        granted: list[str] = []
        refused: list[str] = []

        async def one(tag: str, ask: Ask) -> None:
            try:
                await scheduler.acquire(ask)
            except SlotRefused:
                refused.append(tag)
                return
            granted.append(tag)
            scheduler.release()

        tasks = [asyncio.create_task(one("small change", Ask(ANALYZE, (1.0, -0.1), keep=1)))]
        await _settle()
        tasks.append(asyncio.create_task(one("big change", Ask(ANALYZE, (1.0, -0.9), keep=1))))
        await _settle()
        tasks.append(asyncio.create_task(one("nothing new", Ask(ANALYZE, (4.0,), keep=1))))
        tasks.append(asyncio.create_task(one("new best", Ask(ANALYZE, (0.0,)))))  # never refused
        await _settle()
        scheduler.release()
        await asyncio.gather(*tasks)
        return granted, refused, scheduler.load().refused

    granted, refused, count = asyncio.run(scenario())
    assert granted == ["new best", "big change"]
    assert sorted(refused) == ["nothing new", "small change"]
    assert count == 2


def test_a_cancelled_waiter_leaves_no_slot_taken():
    async def scenario() -> tuple[int, int]:
        scheduler = Scheduler(slots=1)
        await scheduler.acquire(Ask(PROPOSE))
        waiter = asyncio.create_task(scheduler.acquire(Ask(ANALYZE)))
        await _settle()
        waiter.cancel()
        await _settle()
        waiting = sum(scheduler.load().waiting.values())
        scheduler.release()
        return waiting, scheduler.busy

    assert asyncio.run(scenario()) == (0, 0)


def test_the_load_counts_waiting_calls_by_priority_and_binds_over_a_recent_window():
    clock = Clock()

    async def scenario() -> tuple[dict, dict, bool, bool]:
        scheduler = Scheduler(slots=2, window_s=5.0, clock=clock)
        assert not scheduler.binds()  # nothing has waited yet
        await scheduler.acquire(Ask(PROPOSE))
        await scheduler.acquire(Ask(PROPOSE))
        tasks = [asyncio.create_task(scheduler.acquire(Ask(p))) for p in (PROPOSE, ANALYZE, ANALYZE)]
        await _settle()
        during = scheduler.load()
        for _ in range(5):
            scheduler.release()
        await asyncio.gather(*tasks)
        clock.now = 3.0
        recent = scheduler.binds()
        clock.now = 9.0
        later = scheduler.load()
        return during.as_dict(), later.as_dict(), recent, later.binds

    during, later, recent, later_binds = asyncio.run(scenario())
    assert during["busy"] == 2 and during["binds"] is True
    assert during["waiting"] == {"propose": 1, "analyze": 2}
    assert recent is True and later_binds is False
    assert later["busy"] == 0 and later["calls"] == 5 and later["waited"] == 3


def test_ask_llm_passes_the_stage_priority_to_the_run_scheduler():
    """Through ask_llm: a proposal queued after an analysis still gets the slot first."""
    backend = Gated()
    llm = ScheduledBackend(backend, Scheduler(slots=1, aging_s=None))
    cfg = RunConfig()

    class Ctx:  # ask_llm reads the config and the run's LLM only
        config = cfg

    Ctx.llm = llm

    async def scenario() -> list[str]:
        first = asyncio.create_task(ask_llm(Ctx, Node("a", "r", ""), [{"role": "user", "content": "hold"}]))
        await _settle()
        later = [asyncio.create_task(ask_llm(Ctx, Node(t, "r", ""), [{"role": "user", "content": t}],
                                             priority=p))
                 for t, p in (("analysis", ANALYZE), ("repair", PROPOSE))]
        await _settle()
        for tag in ("hold", "repair", "analysis"):
            backend.gates.setdefault(tag, asyncio.Event()).set()
            await _settle()
        await asyncio.gather(first, *later)
        return backend.started

    assert asyncio.run(scenario()) == ["hold", "repair", "analysis"]


def test_the_wrapper_keeps_the_backend_s_name_model_and_attributes_and_closes_it():
    backend = Gated()
    llm = ScheduledBackend(backend, Scheduler(slots=3))
    assert (llm.name, llm.model, llm.context_window, llm.count_tokens("a b c")) == (
        "gated", "gated-model", 4096, 3)
    backend.context_window = 8192  # added or changed later: still the backend's
    assert llm.context_window == 8192
    with pytest.raises(AttributeError):
        _ = llm.no_such_attribute
    asyncio.run(llm.close())
    assert backend.closed
    assert unscheduled(llm) is backend and scheduler_of(llm) is llm.scheduler
    assert scheduler_of(backend) is None


def test_a_call_made_without_a_priority_asks_as_a_query():
    async def scenario() -> Ask:
        with asking(REFLECT) as outer:
            assert outer.priority == REFLECT
        scheduler = Scheduler(slots=1, aging_s=None)
        seen: list[Ask] = []
        real = scheduler.acquire

        async def spy(ask: Ask) -> None:
            seen.append(ask)
            await real(ask)

        scheduler.acquire = spy  # type: ignore[method-assign]
        backend = Gated()
        backend.gates["x"] = asyncio.Event()
        backend.gates["x"].set()
        await ScheduledBackend(backend, scheduler).complete([{"role": "user", "content": "x"}],
                                                           temperature=0.1, max_tokens=16)
        return seen[0]

    assert asyncio.run(scenario()).priority == QUERY


def test_the_run_s_backend_is_scheduled_with_the_research_workers_as_slots_by_default():
    cfg = RunConfig.model_validate({"engine": {"workers": {"research": 5}}})
    llm = scheduled(Gated(), cfg)
    assert scheduler_of(llm) is not None and scheduler_of(llm).slots == 5
    assert scheduled(llm, cfg) is llm  # never twice
    own = RunConfig.model_validate({"scheduler": {"slots": 3}})
    assert scheduler_of(scheduled(Gated(), own)).slots == 3
    off = RunConfig.model_validate({"scheduler": {"enabled": False}})
    assert scheduler_of(scheduled(Gated(), off)) is None
    assert circuits_of(llm) == []  # a backend without a server, behind its scheduler
    offline = OfflineBackend(seed=0)
    assert scheduled(offline, cfg) is offline  # no server to share: never scheduled


def test_circuits_are_found_behind_the_scheduler():
    from evoforge.infra.llm.openai_backend import OpenAIBackend

    server = OpenAIBackend(base_url="http://127.0.0.1:9/v1", model="m", api_key="not-a-key")
    wrapped = scheduled(server, RunConfig())
    assert circuits_of(wrapped) == [server.circuit]
    assert wrapped.circuit is server.circuit


def test_more_slots_go_to_waiting_calls_at_once_and_fewer_take_effect_as_calls_end():
    async def scenario() -> list[tuple[int, int]]:
        scheduler, seen = Scheduler(slots=1, aging_s=None), []
        await scheduler.acquire(Ask(PROPOSE))
        waiters = [asyncio.create_task(scheduler.acquire(Ask(PROPOSE))) for _ in range(3)]
        await _settle()
        seen.append((scheduler.busy, sum(scheduler.load().waiting.values())))  # (1, 3)
        scheduler.resize(3)  # adaptive control grew the research workers
        await _settle()
        seen.append((scheduler.busy, sum(scheduler.load().waiting.values())))  # (3, 1)
        scheduler.resize(1)
        scheduler.release()  # over the new size: the slot is freed, not passed on
        await _settle()
        seen.append((scheduler.busy, sum(scheduler.load().waiting.values())))  # (2, 1)
        for _ in range(2):
            scheduler.release()
        await _settle()
        seen.append((scheduler.busy, sum(scheduler.load().waiting.values())))  # (1, 0): the last one got it
        await asyncio.gather(*waiters)
        return seen

    assert asyncio.run(scenario()) == [(1, 3), (3, 1), (2, 1), (1, 0)]


def test_the_research_stage_prefetches_beyond_the_slots_and_the_slots_follow_its_workers():
    from evoforge.infra.llm.factory import follow_research_workers, prefetch
    from evoforge.stages.research import Research

    cfg = RunConfig.model_validate({"engine": {"workers": {"research": 8}},
                                    "llm": {"base_url": "http://127.0.0.1:9/v1"}})
    assert prefetch(cfg) == 4 and Research().workers(cfg).initial == 12
    offline = RunConfig.model_validate({"engine": {"workers": {"research": 8}}})
    assert prefetch(offline) == 0 and Research().workers(offline).initial == 8  # no LLM: nothing to wait for
    llm = scheduled(Gated(), cfg)
    follow_research_workers(llm, cfg, 16)  # adaptive control: 12 -> 16 research workers
    assert scheduler_of(llm).slots == 12
    fixed = RunConfig.model_validate({**cfg.model_dump(), "scheduler": {"slots": 8}})
    pinned = scheduled(Gated(), fixed)
    follow_research_workers(pinned, fixed, 16)
    assert scheduler_of(pinned).slots == 8  # scheduler.slots fixes them
