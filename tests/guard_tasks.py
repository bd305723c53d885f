"""Shared pieces of the guardrail and debug tests: a tiny task folder, a stage context, a runner
that must not be used, and a scripted stand-in for an LLM (none can run on this machine)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import Task, load_task
from evoforge.infra.config import RunConfig
from evoforge.infra.evolve_block import split_program
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.stages.engineer import engineer
from evoforge.stages.evaluation.job import (
    EvalReport,
    EvalRequest,
    EvaluationRunner,
    InlineEvaluations,
    Release,
)
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.sample import make_sampler

PROGRAM = '''"""A tiny task for the guardrail tests."""

import math


# EVOLVE-BLOCK-START
def solve():
    return 2.0


def helper():
    return math.sqrt(1.0)
# EVOLVE-BLOCK-END


def run():
    return solve() + helper()
'''

EVALUATOR = '''import importlib.util


def _load(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def quick_test(program_path):
    value = _load(program_path).run()
    return {"ok": value > 0, "value": value}


def evaluate(program_path):
    return {"combined_score": float(_load(program_path).run())}
'''

TASK_YAML = '''constraints:
  required_names: [solve, helper, run]
  forbidden_imports: [subprocess, socket, os.system]
quick_test: {function: quick_test, timeout_s: 5}
timeout_s: 10
'''


def make_task(root: Path, program: str = PROGRAM, evaluator: str = EVALUATOR,
              task_yaml: str | None = TASK_YAML) -> Task:
    """Write a task folder under `root` and load it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "initial_program.py").write_text(program)
    (root / "evaluator.py").write_text(evaluator)
    if task_yaml is not None:
        (root / "task.yaml").write_text(task_yaml)
    return load_task(root)


def with_block(task: Task, block: str) -> str:
    """The task's initial program with its EVOLVE block replaced."""
    return split_program(task.initial_code).join(block)


class NoSandbox(EvaluationRunner):
    """An evaluation runner that fails the test if anything reaches the sandbox."""

    def __init__(self) -> None:
        self.requests: list[EvalRequest] = []

    async def run(self, request: EvalRequest, release: Release | None) -> EvalReport:
        self.requests.append(request)
        raise AssertionError("the candidate reached the sandbox")


def make_ctx(task: Task, scratch: Path, llm=None, evaluations: EvaluationRunner | None = None,
             **guard) -> RunView:
    """A stage context for `task` with an empty pool; `guard` sets `guard.*` keys."""
    cfg = RunConfig()
    for key, value in guard.items():
        setattr(cfg.guard, key, value)
    return RunView("r", task, cfg, llm or OfflineBackend(), Pool(), make_sampler(cfg.search),
                   random.Random(0), SandboxLimits(timeout_s=task.timeout_s), scratch,
                   evaluations=evaluations or InlineEvaluations())


def candidate_item(task: Task, code: str) -> Item:
    """An item carrying a proposed candidate of `code`, child of the task's initial program."""
    parent = Node(id="seed", run_id="r", code=task.initial_code, status=EVALUATED, score_full=1.0)
    return Item(v_i=0, parent=parent,
                node=Node(id="cand", run_id="r", code=code, parent_id="seed", motivation="an idea"))


def engineered(item: Item, ctx: RunView) -> Node:
    """Run the engineer stage on `item` and apply its result, as the engine does."""
    result = asyncio.run(engineer(item, ctx))
    item.apply(result.node, result.updates)
    assert item.node is not None
    return item.node
