"""What every stage may read: the task, the config, the LLM backend, the pool and the sampler,
plus the channels a stage may use: the evaluation runner, the speculative release and the memo
of evaluation results (stages/population/repeats.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evoforge.cognition.store import CognitionBase
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task
from evoforge.infra.config import RunConfig
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.nodes import Node
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.evaluation.job import EvaluationRunner, InlineEvaluations
from evoforge.stages.population.case_order import CaseOrder
from evoforge.stages.population.history import PoolHistory
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.repeats import RepeatMemo
from evoforge.stages.rounds.branch_shares import BranchShares
from evoforge.stages.rounds.branches import Plan
from evoforge.stages.sample import ParentSampler


@dataclass
class StageContext:
    """Read-only for stages; only the head changes the pool."""

    run_id: str
    task: Task
    config: RunConfig
    llm: LLMBackend
    pool: Pool
    sampler: ParentSampler
    rng: random.Random
    limits: SandboxLimits
    scratch: Path
    history: PoolHistory = field(default_factory=PoolHistory)
    case_order: CaseOrder | None = None  # validation order of a case-based task
    cognition: CognitionBase | None = None  # the workspace's cognition base, for reading (a sink writes)
    run_cognition: CognitionBase | None = None  # the run's own base: lessons no LLM wrote stay here
    evaluations: EvaluationRunner = field(default_factory=InlineEvaluations)
    optuna_url: str | None = None  # the run's Optuna storage (param search studies)
    plan: Plan | None = None  # the plan agent's current branches (replaced by the plan job)
    shares: BranchShares = field(default_factory=lambda: BranchShares())  # research per branch
    # hands (item, speculative snapshot of its node) to the head, on the flow's event loop
    release: Callable[[Any, Node], None] | None = None
    repeats: RepeatMemo = field(default_factory=RepeatMemo)  # results by program: none evaluated twice
    paths: RunPaths | None = None  # the run folder (for the sinks a stage brings)
    analysis_llm: LLMBackend | None = None  # analyze.llm's endpoint (None: the run's LLM)
