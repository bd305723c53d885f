"""The leak barrier: held-out scores and cases (a gated task's `final` level, a text or playbook
task's `test` split) never reach any code that chooses parents, inspirations, plans or promotions.
Pinned two ways: no selection module can name them, in any form the code reads them by, and after a
run whose final report recorded them, nothing reachable from the selection context holds one."""

from __future__ import annotations

import ast
import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
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
LAYERS = ("flows", "stages", "evaluators", "cognition", "infra")
HELD_OUT = ("test", "final")  # the held-out split of a task model's cases; the held-out level
# names that denote them, or every split at once (iterating them reaches `test`)
HELD_OUT_NAMES = {"TEST", "FINAL", "SPLITS", "splits", "final_scores", "FinalScore", "score_final",
                  "write_final", "held_out", "held_out_of"}
ALL = frozenset({"*"})
# who may name them, and what: no module that selects is here (checked below)
HELD_OUT_READERS: dict[str, frozenset[str]] = {
    "flows/final_report.py": ALL,  # runs the winners on the held-out level or split
    "stages/reports/run_report.py": ALL,  # report.md, from the final table
    "stages/reports/gated_report.py": ALL,
    "stages/reports/task_model_report.py": ALL,
    "infra/nodestore.py": ALL,  # the final table itself
    "evaluators/task_model.py": ALL,  # owns a text task's splits; scores the case ids it is given
    "flows/session.py": frozenset({"held_out"}),  # report.md at the session's close
    "flows/commands.py": frozenset({"held_out"}),  # `evoforge report`
    "evaluators/task.py": frozenset({"'final'"}),  # whether task.yaml declares the level
    "evaluators/task_yaml.py": frozenset({"'final'"}),  # task.yaml's level keys
    "infra/nodes.py": frozenset({"'final'"}),  # the level vocabulary; Node.score refuses `final`
    "stages/sinks/base.py": frozenset({"FINAL", "'final'"}),  # the event kind the final scores travel in
    "stages/sinks/node_db.py": frozenset({"FINAL", "write_final"}),  # ...recorded into the final table
    "stages/sinks/mlflow_sink.py": frozenset({"FINAL"}),  # ...and onto the MLflow parent run
}
READER_FOLDERS = ("evaluators/tasks/",)  # the built-in tasks' own evaluators define their splits
SELECTION = ("stages/sample/", "stages/rounds/", "stages/population/", "stages/research", "stages/gate.py",
             "stages/rollout.py", "stages/generate.py", "stages/merge.py", "stages/reflect",
             "stages/curator.py", "stages/learn.py", "stages/tuning/", "stages/pipeline/", "flows/engine.py",
             "flows/head.py", "cognition/")


def _parse(source: str) -> ast.Module:
    """ast.parse in a fresh thread: CPython 3.11.7 can raise "AST constructor recursion depth
    mismatch" in a thread whose recursion counters an earlier test left off (a CI failure)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(ast.parse, source).result()


def held_out_reads(source: str) -> list[str]:
    """Every place `source` names a held-out split or level, or all splits at once: a `"test"` or
    `"final"` string (`ids("test")`, `splits["test"]`, `at_level("final")`, `TEST = "test"`), a name
    or attribute that stands for them (`TEST`, `SPLITS`, `.splits`, `final_scores`...), an import of
    one, and a text task's cases by id (`.by_id`) other than looked up one at a time."""
    tree = _parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in HELD_OUT:
            found.append(f"{line}: '{node.value}'")
        elif isinstance(node, ast.Name) and node.id in HELD_OUT_NAMES:
            found.append(f"{line}: {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in HELD_OUT_NAMES:
            found.append(f"{line}: {node.attr}")
        elif isinstance(node, ast.alias) and node.name.rsplit(".", 1)[-1] in HELD_OUT_NAMES:
            found.append(f"{line}: {node.name.rsplit('.', 1)[-1]}")
        elif isinstance(node, ast.Attribute) and node.attr == "by_id":
            parent = parents.get(node)
            if not (isinstance(parent, ast.Subscript) and parent.value is node):
                found.append(f"{line}: by_id (all cases, every split)")
    return found


def _allowed(rel: str, read: str) -> bool:
    allowed = HELD_OUT_READERS.get(rel, frozenset())
    return rel.startswith(READER_FOLDERS) or allowed == ALL or read.split(": ", 1)[1] in allowed


def test_no_module_outside_the_final_report_names_a_held_out_split_or_level():
    offenders = []
    for layer in LAYERS:
        for path in sorted((REPO / layer).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            reads = held_out_reads(path.read_text())
            offenders += [f"{rel}:{read}" for read in reads if not _allowed(rel, read)]
    assert offenders == []


def test_no_selection_module_is_allowed_to_name_them():
    readers = [*HELD_OUT_READERS, *READER_FOLDERS]
    assert [r for r in readers if r.startswith(SELECTION)] == []
    assert all((REPO / r).exists() for r in readers)  # a reader moved or renamed leaves the list


@pytest.mark.parametrize("line", [
    'ids = channel.module.ids("test")',
    "ids = channel.module.ids('TEST')",
    'cases = channel.module.splits["test"]',
    'cases = channel.module.splits.get(split)',
    "pool = [c for split in SPLITS for c in module.ids(split)]",
    "from evoforge.flows.final_report import TEST",
    "from evoforge.evaluators.task_model import SPLITS",
    "ids = module.ids(TEST)",
    'TEST = "test"',
    'if split == "test": pass',
    "pool = list(channel.module.by_id)",
    "pool = channel.module.by_id.values()",
    'request = request.at_level("final")',
    "score = node.score(FINAL)",
    "rows = store.final_scores()",
    "from evoforge.infra.nodestore import FinalScore",
    "rows = held_out(store)",
    "x = node.score_final",
])
def test_the_scan_finds_every_form_of_a_held_out_read(line):
    assert held_out_reads(line), line


@pytest.mark.parametrize("line", [
    'ids = channel.module.ids("train") or channel.module.ids("val")',
    "case = channel.module.by_id[case_id]",  # one case, by an id from a split the search may use
    'score = node.score("full")',
])
def test_the_scan_lets_the_search_read_its_own_splits(line):
    assert held_out_reads(line) == []


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
