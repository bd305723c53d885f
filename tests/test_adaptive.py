"""The adaptive-worker rule: the slow stage with work waiting gains a worker, the fast one
gives one back, within bounds; a balanced pipeline is left alone."""

from __future__ import annotations

from dataclasses import dataclass, field

from evoforge.flows.adaptive import AdaptiveController
from evoforge.flows.demand import Ema, ResearchDemand
from evoforge.infra.config import AdaptiveConfig


@dataclass
class FakeEngine:
    """Stage meters advanced by hand: per-worker service rate and worker count per stage."""

    per_worker: dict[str, float]
    counts: dict[str, int]
    waiting: dict[str, bool] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=dict)
    busy: dict[str, float] = field(default_factory=dict)
    low: int = 1
    high: dict[str, int] = field(default_factory=dict)

    def advance(self, seconds: float) -> None:
        for stage, rate in self.per_worker.items():
            busy = self.counts[stage] * seconds
            self.busy[stage] = self.busy.get(stage, 0.0) + busy
            self.done[stage] = self.done.get(stage, 0) + round(rate * busy)

    def stage_names(self):
        return list(self.per_worker)

    def bounds(self, stage):
        return self.low, self.high.get(stage, 8)

    def workers(self, stage):
        return self.counts[stage]

    def work_waiting(self, stage):
        return self.waiting.get(stage, True)

    def meter(self, stage):
        return self.done.get(stage, 0), self.busy.get(stage, 0.0)

    def add_worker(self, stage):
        self.counts[stage] += 1

    def remove_worker(self, stage):
        self.counts[stage] -= 1


def _step(controller, engine, seconds=10.0):
    engine.advance(seconds)
    return controller.step(engine)


def test_slow_stage_with_work_gains_and_fast_stage_gives_back():
    engine = FakeEngine(per_worker={"research": 0.4, "engineer": 5.0, "reflect": 1.0},
                        counts={"research": 2, "engineer": 2, "reflect": 2}, high={"research": 16})
    controller = AdaptiveController(AdaptiveConfig(enabled=True, max_workers={"research": 16, "engineer": 8}))
    decisions = _step(controller, engine)
    assert engine.counts["research"] == 3 and engine.counts["engineer"] == 1
    assert any(d.startswith("+1 research") for d in decisions)
    assert any(d.startswith("-1 engineer") for d in decisions)
    assert [d.split(" ", 1)[1] for d in controller.decisions] == decisions  # logged with a time


def test_no_worker_is_added_without_work_waiting():
    engine = FakeEngine(per_worker={"research": 0.5, "engineer": 5.0, "reflect": 1.0},
                        counts={"research": 2, "engineer": 4, "reflect": 2},
                        waiting={"research": False})
    controller = AdaptiveController(AdaptiveConfig(enabled=True))
    _step(controller, engine)
    assert engine.counts["research"] == 2


def test_bounds_hold():
    engine = FakeEngine(per_worker={"research": 0.1, "engineer": 50.0},
                        counts={"research": 3, "engineer": 1}, high={"research": 3})
    controller = AdaptiveController(AdaptiveConfig(enabled=True, max_workers={"research": 3}, min_workers=1))
    for _ in range(5):
        _step(controller, engine)
    assert engine.counts == {"research": 3, "engineer": 1}


def test_balanced_stages_are_left_alone():
    engine = FakeEngine(per_worker={"research": 1.0, "engineer": 1.5}, counts={"research": 4, "engineer": 3})
    controller = AdaptiveController(AdaptiveConfig(enabled=True))
    for _ in range(4):
        assert _step(controller, engine) == []


def test_rates_are_smoothed():
    ema = Ema(alpha=0.5)
    for value in (10.0, 0.0):
        ema.add(value)
    assert ema.value == 5.0


def test_research_demand_follows_littles_law():
    demand = ResearchDemand()
    assert demand.target(16, 2) == 16  # nothing measured yet: all workers
    demand.llm_s.add(2.0)
    demand.eval_s.add(1.0)  # evaluators absorb 2/s; 2 s per call: 4 calls in flight (+2 buffer)
    assert demand.target(16, 2) == 6
    demand.llm_s.value, demand.eval_s.value = 0.001, 0.2
    assert demand.target(16, 2) == 3
    demand.llm_s.value = 100.0
    assert demand.target(16, 2) == 16
