"""The leak barrier: held-out `final` scores never reach any code that chooses parents,
inspirations, plans or promotions. Pinned two ways: no selection module can name them, and after a
run whose final report recorded them, nothing reachable from the selection context holds one."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from evoforge.evaluators.task import load_task
from evoforge.flows.cli import main
from evoforge.flows.session import open_session
from evoforge.infra.config_load import load_config
from evoforge.infra.llm.factory import make_backend
from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import NodeStore
from evoforge.stages.algorithms import asi_evolve
from tests.gated_tasks import FINAL_LOW, write_staged_task

REPO = Path(__file__).resolve().parent.parent
# the only modules that may read or write final scores: the final report and report.md
FINAL_READERS = {"flows/final_report.py", "stages/reports/run_report.py", "stages/reports/gated_report.py",
                 "stages/reports/task_model_report.py",
                 "infra/nodestore.py"}
_FINAL_NAMES = re.compile(r"final_scores|FinalScore|score_final|at_level\(\s*[\"']final")


def test_no_module_outside_the_final_report_names_final_scores():
    offenders = []
    for layer in ("flows", "stages", "evaluators", "cognition", "infra"):
        for path in sorted((REPO / layer).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel not in FINAL_READERS and _FINAL_NAMES.search(path.read_text()):
                offenders.append(rel)
    assert offenders == []


def test_nodes_carry_no_final_score():
    assert "score_final" not in {f.name for f in dataclasses.fields(Node)}
    with pytest.raises(ValueError, match="not 'final'"):
        Node(id="a", run_id="r", code="").score("final")


def _floats(root: object) -> list[float]:
    """Every float reachable from `root` through evoforge objects, containers and dataclasses."""
    seen: set[int] = set()
    found: list[float] = []
    stack = [root]
    while stack:
        obj = stack.pop()
        if isinstance(obj, float):
            found.append(obj)
            continue
        if obj is None or isinstance(obj, (str, bytes, int, bool, Path)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
            stack.extend(obj)
        elif type(obj).__module__.startswith("evoforge") and hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            stack.extend(getattr(obj, f.name) for f in dataclasses.fields(obj))
        elif hasattr(obj, "__slots__") and type(obj).__module__.startswith("evoforge"):
            stack.extend(getattr(obj, s) for s in obj.__slots__ if hasattr(obj, s))
    return found


def _leaks(values: list[float]) -> list[float]:
    return [v for v in values if FINAL_LOW <= v <= FINAL_LOW + 1]


@pytest.mark.slow
def test_after_the_final_report_the_selection_context_holds_no_final_score(tmp_path):
    task_dir = write_staged_task(tmp_path)
    run_dir, workspace = tmp_path / "run", tmp_path / "ws"
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"param_search": {"trials": 2, "startup": 1},
                                  "plan": {"slots": 2, "every": 1},
                                  "promotion": {"every": 1, "top_k": 2, "final_top": 2},
                                  "cognition": {"enabled": False}, "tracking": {"mlflow": False}}))
    assert main(["run", str(task_dir), "--run-dir", str(run_dir), "--workspace", str(workspace),
                 "--config", str(config), "--max-evals", "8", "--seed", "1", "--quiet"]) == 0
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        finals = [f.score for f in store.final_scores()]
    assert len(finals) == 2 and len(_leaks(finals)) == 2  # the report has them...

    cfg = load_config(config, {"workspace": str(workspace)})
    task = load_task(task_dir)
    session = open_session(task, cfg, run_dir, make_backend(cfg.llm, cfg.seed), workspace,
                           asi_evolve.pipeline())
    try:
        reachable = _floats(session.ctx)  # pool, sampler, plan, shares, history, config, task...
        assert len(reachable) > 20  # the walk sees the pool's scores
        assert _leaks(reachable) == []  # ...and nothing that selects can reach them
        planted = session.ctx.pool.nodes[0]
        planted.metrics["oops"] = finals[0]  # the walk would find one that got onto a node
        assert _leaks(_floats(session.ctx)) == [finals[0]]
        del planted.metrics["oops"]
    finally:
        session.hub.close()
