"""What every stage, sampler and sink is given of the run: a read-only view.

`RunView` is built once, when the run is built (flows/session.py), and never changed after: its
fields cannot be assigned (`dataclasses.FrozenInstanceError`). It holds the run's facts (id,
task, config, sandbox limits, folders), the services injected then (the LLM backends, the
evaluation runner, the release channel, the memo of evaluation results, the cognition bases,
the Optuna storage) and the run state the head owns (flows/run_state.py: pool, sampler, history,
case order, branch shares, rounds), which stages read and only the head changes. Example::

    view = RunView("r", task, cfg, llm, pool, sampler, random.Random(0), SandboxLimits(), scratch)
    view.pool.best              # read the run
    view.pool = Pool()          # raises dataclasses.FrozenInstanceError
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from evoforge.cognition.store import CognitionBase
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.nodes import Node
from evoforge.infra.process_local import ProcessLocal
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.evaluation.job import EvaluationRunner, InlineEvaluations
from evoforge.stages.pipeline.extra_evals import ExtraEvaluations
from evoforge.stages.population.case_order import CaseOrder
from evoforge.stages.population.history import PoolHistory
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.repeats import RepeatMemo
from evoforge.stages.rounds.branch_shares import BranchShares
from evoforge.stages.rounds.branches import Plan
from evoforge.stages.rounds.records import Rounds
from evoforge.stages.sample import ParentSampler

if TYPE_CHECKING:
    from evoforge.stages.population.item import Item


class ReleaseChannel:
    """Hands an item and the speculative snapshot of its node to the head, on the flow's event
    loop. Built before the run's view and its engine; the engine connects to it once, when it is
    built (flows/engine.py), and a release before that is an error."""

    def __init__(self) -> None:
        self._receiver: Callable[[Item, Node], None] | None = None

    def connect(self, receiver: Callable[[Item, Node], None]) -> None:
        """Make `receiver` (the engine) the channel's one receiver."""
        if self._receiver is not None:
            raise RuntimeError("the release channel is connected to an engine already")
        self._receiver = receiver

    def __call__(self, item: Item, snapshot: Node) -> None:
        if self._receiver is None:
            raise RuntimeError("no engine receives this run's releases yet")
        self._receiver(item, snapshot)


@dataclass(frozen=True)
class RunView(ProcessLocal):
    """The run as stages read it: facts, injected services, and the head's state (read-only)."""

    run_id: str
    task: Task
    config: RunConfig
    llm: LLMBackend
    pool: Pool  # the head's; stages read it
    sampler: ParentSampler  # the head's; the engine's draw asks it for parents
    rng: random.Random
    limits: SandboxLimits
    scratch: Path
    history: PoolHistory = field(default_factory=PoolHistory)
    case_order: CaseOrder | None = None  # validation order of a case-based task
    cognition: CognitionBase | None = None  # the workspace's cognition base, for reading (a sink writes)
    run_cognition: CognitionBase | None = None  # the run's own base: lessons no LLM wrote stay here
    read_cognition: tuple[CognitionBase, ...] = ()  # bases it only reads (cognition.read_uris: a team's)
    evaluations: EvaluationRunner = field(default_factory=InlineEvaluations)
    optuna_url: str | None = None  # the run's Optuna storage (param search studies)
    rounds: Rounds = field(default_factory=Rounds)  # the plans and promotions the head applied
    shares: BranchShares = field(default_factory=lambda: BranchShares())  # research per branch
    release: ReleaseChannel | None = None  # None: no speculative release in this run
    repeats: RepeatMemo = field(default_factory=RepeatMemo)  # results by program: none evaluated twice
    paths: RunPaths | None = None  # the run folder (for the sinks a stage brings)
    analysis_llm: LLMBackend | None = None  # analyze.llm's endpoint (None: the run's LLM)
    extra_evals: ExtraEvaluations = field(default_factory=ExtraEvaluations)  # held against max_evals

    @property
    def plan(self) -> Plan | None:
        """The plan agent's current branches (None: no plan); a new plan is the head's to apply."""
        return self.rounds.plan
