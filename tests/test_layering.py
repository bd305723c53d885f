"""Imports inside stages/ flow one way: the concept packages (tuning, population, evaluation,
sample, rounds) never import the stage pipeline (stages/pipeline/) nor a stage module
(stages/*.py), which sit above them; and no flow keeps live run state in a module global.

A stage's own node data (`stages/<stage>_data.py`, a `NodeData` declaration) is the one kind of
top-level module the concept packages may read: it imports nothing from stages/ (checked here),
so reading it is no arrow back up."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ROOT / "stages"
CONCEPTS = ("tuning", "population", "evaluation", "sample", "rounds")


def _imported(source: str, package: tuple[str, ...]) -> list[str]:
    """Every module `source` imports (absolute names; a relative import resolved from `package`,
    the folders of the module's package under the repository root)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package up
                up = package[: len(package) - node.level + 1]
                base = ".".join(("evoforge", *up, *([node.module] if node.module else [])))
            else:
                base = node.module or ""
            names.append(base)
            names += [f"{base}.{a.name}" for a in node.names]  # `from evoforge.stages import engineer`
    return names


def _upstairs() -> set[str]:
    """The modules a concept package must not import: the pipeline and every stage plug-in."""
    plugins = {f"evoforge.stages.{p.stem}" for p in STAGES.glob("*.py")
               if p.stem != "__init__" and not p.stem.endswith("_data")}
    return plugins | {"evoforge.stages.pipeline"}


def _violations(modules: dict[str, tuple[str, tuple[str, ...]]]) -> list[str]:
    """`label imports name` for each banned import of the modules (label -> (source, package))."""
    banned = _upstairs()
    out = []
    for label, (source, package) in modules.items():
        for name in _imported(source, package):
            if any(name == b or name.startswith(b + ".") for b in banned):
                out.append(f"{label} imports {name}")
    return out


def test_the_concept_packages_import_neither_the_pipeline_nor_a_stage_module():
    files = [p for c in CONCEPTS for p in sorted((STAGES / c).rglob("*.py"))]
    assert len(files) > 20  # the packages are where this test looks for them
    modules = {str(p.relative_to(ROOT)): (p.read_text(), p.parent.relative_to(ROOT).parts) for p in files}
    assert _violations(modules) == []


def test_a_stage_data_module_imports_nothing_from_stages():
    data = sorted(STAGES.glob("*_data.py"))
    assert data  # the stages declare their node data there
    for path in data:
        names = _imported(path.read_text(), ("stages",))
        assert not [n for n in names if n.startswith("evoforge.stages")], path


def test_the_check_catches_an_arrow_back_up():
    source = ("from evoforge.stages.pipeline.run_view import RunView\nfrom evoforge.stages import engineer\n"
              "from ..pipeline import draw\nfrom evoforge.stages.population.pool import Pool\n")
    found = _violations({"probe": (source, ("stages", "rounds"))})
    assert found == ["probe imports evoforge.stages.pipeline.run_view",
                     "probe imports evoforge.stages.pipeline.run_view.RunView",
                     "probe imports evoforge.stages.engineer",
                     "probe imports evoforge.stages.pipeline",
                     "probe imports evoforge.stages.pipeline.draw"]


def test_no_flow_keeps_live_runs_in_a_module_global():
    for path in sorted((ROOT / "flows").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:  # module level only
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if value is None:
                continue
            called = value.func if isinstance(value, ast.Call) else None
            name = getattr(called, "attr", None) or getattr(called, "id", None)
            assert name != "ContextVar", f"{path.name}: a context variable at module level"
            assert not (isinstance(value, ast.Dict) and not value.keys), f"{path.name}: a registry dict"


FLOORS = ("tuning", "population", "sample", "evaluation", "rounds", "sinks")  # from the ground up


def _below_only(files: dict[str, tuple[str, tuple[str, ...]]], floor: int) -> list[str]:
    """`label imports name` for each import of a concept package on a floor above `floor`."""
    above = {f"evoforge.stages.{p}" for p in FLOORS[floor + 1:]}
    return [f"{label} imports {name}" for label, (source, package) in files.items()
            for name in _imported(source, package)
            if any(name == a or name.startswith(a + ".") for a in above)]


def test_the_concept_packages_import_only_the_floors_below_them():
    """tuning < population < sample < evaluation < rounds < sinks: no package reads one above it,
    and the sinks read no stage module (a stage's data, `*_data.py`, they may)."""
    found = []
    for floor, package in enumerate(FLOORS):
        files = {str(p.relative_to(ROOT)): (p.read_text(), p.parent.relative_to(ROOT).parts)
                 for p in sorted((STAGES / package).rglob("*.py"))}
        assert files, package
        found += _below_only(files, floor)
        if package == "sinks":
            found += _violations(files)
    assert found == []


def test_the_floor_check_catches_a_package_reading_one_above_it():
    probe = {"population/x.py": ("from evoforge.stages.sample.features import FeatureSpace\n",
                                 ("stages", "population"))}
    assert _below_only(probe, FLOORS.index("population")) == [
        "population/x.py imports evoforge.stages.sample.features",
        "population/x.py imports evoforge.stages.sample.features.FeatureSpace"]
