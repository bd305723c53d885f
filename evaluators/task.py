"""Load a task folder (evoforge ``task.yaml`` and/or an OpenEvolve example) into a ``Task``.

A task folder holds the program (with one EVOLVE-BLOCK-START/END pair), ``evaluator.py``
defining ``evaluate(program_path)``, and optionally:

- ``task.yaml`` (ours, strict): ``name``, ``program``, ``description``, ``timeout_s``,
  ``objective: {metric, direction}``, ``cascade``, ``cascade_thresholds``, ``cases`` (``false``
  evaluates a case-based evaluator as a plain one), ``constraints: {required_names,
  forbidden_imports}`` (checked statically on every candidate) and ``quick_test: {function,
  timeout_s}`` (a cheap evaluator function run before the full evaluation). Any other key is an
  error that names it.
- ``config.yaml`` (OpenEvolve's, lenient): only ``evaluator.timeout`` -> ``timeout_s``,
  ``evaluator.cascade_evaluation`` -> ``cascade``, ``evaluator.cascade_thresholds`` ->
  ``cascade_thresholds`` and ``prompt.system_message`` -> ``description`` are read; every other
  key (``llm``, ``max_iterations``, ``database``, ...) belongs to OpenEvolve and is ignored.

``task.yaml`` wins over ``config.yaml``. Cascade is on when ``evaluate_stage1`` exists and no
config turns it off (OpenEvolve's default), with OpenEvolve's default thresholds (0.5, 0.75, 0.9)
when none are given; without ``evaluate_stage1`` OpenEvolve evaluates directly, and so do we.
A task is case-based (``evaluators/cases.py``) when ``evaluator.py`` also defines ``cases()`` and
``evaluate_case(program_path, case)`` and ``task.yaml`` does not say ``cases: false``.
The evaluator is inspected by parsing it, never by importing it. Example::

    task = load_task("circle_packing")
    task.better(2.1, 1.9)  # True: the objective is maximised
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evoforge.infra import pyast
from evoforge.infra.evolve_block import END_MARKER, START_MARKER, EditError, split_program

TASK_YAML = "task.yaml"
OPENEVOLVE_CONFIG = "config.yaml"
EVALUATOR = "evaluator.py"
DEFAULT_PROGRAM = "initial_program.py"
OPENEVOLVE_THRESHOLDS = (0.5, 0.75, 0.9)
DIRECTIONS = ("maximize", "minimize")
QUICK_TEST_TIMEOUT_S = 5.0


class TaskError(ValueError):
    """A task folder that cannot be used; the message is one line naming the problem."""


@dataclass(frozen=True)
class Constraints:
    """What every candidate must satisfy, read from its source before any evaluation runs."""

    required_names: tuple[str, ...] = ()  # defined at the top level of the program
    forbidden_imports: tuple[str, ...] = ()  # modules (and their submodules) it must not import


@dataclass(frozen=True)
class QuickTest:
    """A cheap evaluator function, ``function(program_path) -> dict``, run before the full evaluation."""

    function: str
    timeout_s: float = QUICK_TEST_TIMEOUT_S


@dataclass(frozen=True)
class Task:
    """An evolvable program, how to evaluate it, and what to optimise."""

    name: str
    root: Path
    program_name: str
    initial_code: str
    evaluator_path: Path
    objective: str = "combined_score"
    direction: str = "maximize"
    description: str = ""
    timeout_s: float = 60.0
    cascade: bool = False
    cascade_thresholds: tuple[float, ...] = ()
    stage_aware: bool = False
    case_based: bool = False
    sources: tuple[str, ...] = ()
    constraints: Constraints = field(default_factory=Constraints)
    quick_test: QuickTest | None = None

    def better(self, a: float, b: float) -> bool:
        """True when score ``a`` beats score ``b`` under the task's direction."""
        return a < b if self.direction == "minimize" else a > b


def builtin_tasks_dir() -> Path:
    """The folder holding the built-in tasks."""
    return Path(__file__).resolve().parent / "tasks"


def builtin_task_names() -> list[str]:
    """Names of the built-in tasks, sorted."""
    root = builtin_tasks_dir()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / EVALUATOR).is_file())


def load_task(spec: str | os.PathLike[str]) -> Task:
    """Load a task from a folder path or a built-in name such as ``"circle_packing"``."""
    root = _resolve(spec)
    ours = _read_task_yaml(root)
    theirs = _read_openevolve_config(root)
    settings = {**(theirs or {}), **(ours or {})}
    evaluator_path = root / EVALUATOR
    functions = _evaluator_functions(evaluator_path)
    program_name = settings.get("program") or _find_program(root)
    initial_code = _read_program(root, program_name)

    has_stage1 = "evaluate_stage1" in functions
    if ours and ours.get("cascade") and not has_stage1:
        raise TaskError(f"{TASK_YAML}: cascade is true but {EVALUATOR} defines no evaluate_stage1")
    cascade = has_stage1 and settings.get("cascade", True)  # OpenEvolve: no stage1, no cascade
    has_cases = {"cases", "evaluate_case"} <= functions.keys()
    if ours and ours.get("cases") and not has_cases:
        raise TaskError(f"{TASK_YAML}: cases is true but {EVALUATOR} lacks cases() or evaluate_case()")
    quick_test = settings.get("quick_test")
    if quick_test is not None and quick_test.function not in functions:
        raise TaskError(f"{TASK_YAML}: quick_test.function '{quick_test.function}' is not defined "
                        f"at the top level of {EVALUATOR}")
    thresholds = tuple(settings.get("cascade_thresholds") or OPENEVOLVE_THRESHOLDS)
    objective = settings.get("objective", {})
    sources = []
    if ours is not None:
        sources.append(TASK_YAML)
    if theirs is not None:
        sources.append(f"{OPENEVOLVE_CONFIG} (OpenEvolve, mapped)")
    return Task(
        name=settings.get("name", root.name),
        root=root,
        program_name=program_name,
        initial_code=initial_code,
        evaluator_path=evaluator_path,
        objective=objective.get("metric", "combined_score"),
        direction=objective.get("direction", "maximize"),
        description=settings.get("description", ""),
        timeout_s=float(settings.get("timeout_s", 60.0)),
        cascade=cascade,
        cascade_thresholds=thresholds if cascade else (),
        stage_aware="stage" in functions.get("evaluate", ()),
        case_based=has_cases and settings.get("cases", True),
        sources=tuple(sources),
        constraints=settings.get("constraints", Constraints()),
        quick_test=quick_test,
    )


def _resolve(spec: str | os.PathLike[str]) -> Path:
    path = Path(spec).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise TaskError(f"task path '{spec}' is a file, expected a task folder")
    if isinstance(spec, str) and spec in builtin_task_names():
        return builtin_tasks_dir() / spec
    known = ", ".join(builtin_task_names()) or "none"
    raise TaskError(
        f"task '{spec}' not found: no such folder and no built-in task of that name "
        f"(built-ins: {known})"
    )


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "parse error"
        raise TaskError(f"{path.name}: invalid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path.name}: cannot read: {_one_line(exc)}") from None


def _read_task_yaml(root: Path) -> dict[str, Any] | None:
    """Validate ``task.yaml`` strictly; None when the folder has none."""
    path = root / TASK_YAML
    if not path.is_file():
        return None
    data = _load_yaml(path) or {}
    if not isinstance(data, dict):
        raise TaskError(f"{TASK_YAML}: expected a mapping of keys, got {type(data).__name__}")
    for key in data:
        if key not in _TASK_FIELDS:
            raise TaskError(
                f"{TASK_YAML}: unknown key '{key}' (allowed: {', '.join(_TASK_FIELDS)})"
            )
    out = {key: _TASK_FIELDS[key](value, f"{TASK_YAML}: {key}") for key, value in data.items()}
    if "program" in out:
        _check_program_name(out["program"], root)
    return out


def _read_openevolve_config(root: Path) -> dict[str, Any] | None:
    """Map the few OpenEvolve ``config.yaml`` keys evoforge uses; None when absent."""
    path = root / OPENEVOLVE_CONFIG
    if not path.is_file():
        return None
    data = _load_yaml(path) or {}
    if not isinstance(data, dict):
        raise TaskError(f"{OPENEVOLVE_CONFIG}: expected a mapping, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for (section, key), (target, check) in _OPENEVOLVE_FIELDS.items():
        block = data.get(section)
        if isinstance(block, dict) and block.get(key) is not None:
            out[target] = check(block[key], f"{OPENEVOLVE_CONFIG}: {section}.{key}")
    return out


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TaskError(f"{where} must be a non-empty string, got {value!r}")
    return value.strip()


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise TaskError(f"{where} must be a string, got {type(value).__name__}")
    return value.strip()


def _timeout(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise TaskError(f"{where} must be a positive number of seconds, got {value!r}")
    return float(value)


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise TaskError(f"{where} must be true or false, got {value!r}")
    return value


def _numbers(value: Any, where: str) -> tuple[float, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        raise TaskError(f"{where} must be a list of numbers, got {value!r}")
    return tuple(float(v) for v in value)


def _objective(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TaskError(f"{where} must be a mapping with 'metric' and 'direction'")
    for key in value:
        if key not in ("metric", "direction"):
            raise TaskError(f"{where}: unknown key '{key}' (allowed: metric, direction)")
    out = {}
    if "metric" in value:
        out["metric"] = _name(value["metric"], f"{where}.metric")
    if "direction" in value:
        if value["direction"] not in DIRECTIONS:
            raise TaskError(
                f"{where}.direction must be 'maximize' or 'minimize', got {value['direction']!r}"
            )
        out["direction"] = value["direction"]
    return out


def _keys(value: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TaskError(f"{where} must be a mapping with keys {', '.join(allowed)}, got {value!r}")
    for key in value:
        if key not in allowed:
            raise TaskError(f"{where}: unknown key '{key}' (allowed: {', '.join(allowed)})")
    return value


def _python_names(value: Any, where: str, dotted: bool = False) -> tuple[str, ...]:
    kind = "module names" if dotted else "Python names"
    if not isinstance(value, list) or not all(
        isinstance(v, str) and all(part.isidentifier() for part in (v.split(".") if dotted else [v]))
        for v in value
    ):
        raise TaskError(f"{where} must be a list of {kind}, got {value!r}")
    return tuple(value)


def _constraints(value: Any, where: str) -> Constraints:
    value = _keys(value, where, ("required_names", "forbidden_imports"))
    return Constraints(
        required_names=_python_names(value.get("required_names", []), f"{where}.required_names"),
        forbidden_imports=_python_names(value.get("forbidden_imports", []),
                                        f"{where}.forbidden_imports", dotted=True),
    )


def _quick_test(value: Any, where: str) -> QuickTest:
    value = _keys(value, where, ("function", "timeout_s"))
    if "function" not in value:
        raise TaskError(f"{where}.function is missing (the evaluator function to call)")
    function = _name(value["function"], f"{where}.function")
    if not function.isidentifier():
        raise TaskError(f"{where}.function must be a Python name, got {function!r}")
    timeout = _timeout(value.get("timeout_s", QUICK_TEST_TIMEOUT_S), f"{where}.timeout_s")
    return QuickTest(function, timeout)


_TASK_FIELDS = {
    "name": _name,
    "program": _name,
    "description": _text,
    "timeout_s": _timeout,
    "objective": _objective,
    "cascade": _flag,
    "cascade_thresholds": _numbers,
    "cases": _flag,
    "constraints": _constraints,
    "quick_test": _quick_test,
}
_OPENEVOLVE_FIELDS = {
    ("evaluator", "timeout"): ("timeout_s", _timeout),
    ("evaluator", "cascade_evaluation"): ("cascade", _flag),
    ("evaluator", "cascade_thresholds"): ("cascade_thresholds", _numbers),
    ("prompt", "system_message"): ("description", _text),
}


def _check_program_name(name: str, root: Path) -> None:
    if Path(name).name != name or not name.endswith(".py"):
        raise TaskError(f"{TASK_YAML}: program must be a .py file name in the task folder, got {name!r}")
    if name == EVALUATOR:
        raise TaskError(f"{TASK_YAML}: program cannot be {EVALUATOR}")
    if not (root / name).is_file():
        raise TaskError(f"{TASK_YAML}: program '{name}' does not exist in {root}")


def _find_program(root: Path) -> str:
    if (root / DEFAULT_PROGRAM).is_file():
        return DEFAULT_PROGRAM
    candidates = sorted(
        p.name for p in root.glob("*.py") if p.name != EVALUATOR and _has_marker(p)
    )
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise TaskError(
            f"no program in {root}: expected {DEFAULT_PROGRAM} or one .py file with "
            f"{START_MARKER}/{END_MARKER} markers"
        )
    raise TaskError(
        f"several programs with EVOLVE markers in {root} ({', '.join(candidates)}); "
        f"name one with 'program' in {TASK_YAML}"
    )


def _has_marker(path: Path) -> bool:
    try:
        return START_MARKER in path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


def _read_program(root: Path, name: str) -> str:
    try:
        code = (root / name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{name}: cannot read: {_one_line(exc)}") from None
    if START_MARKER not in code and END_MARKER not in code:
        raise TaskError(f"{name}: no {START_MARKER}/{END_MARKER} markers (mark the evolvable code)")
    try:
        split_program(code)
    except EditError as exc:
        raise TaskError(f"{name}: {exc}") from None
    _parse(code, name)
    return code


def _parse(code: str, name: str) -> ast.Module:
    try:
        return pyast.parse(code, filename=name)
    except SyntaxError as exc:
        raise TaskError(f"{name}: syntax error at line {exc.lineno}: {exc.msg}") from None


def _evaluator_functions(path: Path) -> dict[str, tuple[str, ...]]:
    """Top-level callables of ``evaluator.py`` mapped to their parameter names."""
    if not path.is_file():
        raise TaskError(f"no {EVALUATOR} in {path.parent} (it must define evaluate(program_path))")
    try:
        code = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{EVALUATOR}: cannot read: {_one_line(exc)}") from None
    functions: dict[str, tuple[str, ...]] = {}
    for node in top_level_statements(_parse(code, EVALUATOR).body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            functions[node.name] = tuple(params)
        elif isinstance(node, ast.Assign | ast.ImportFrom | ast.Import):
            for name in _bound_names(node):
                functions.setdefault(name, ())
    if "evaluate" not in functions:
        raise TaskError(f"{EVALUATOR}: no top-level function 'evaluate(program_path)'")
    return functions


def top_level_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, including those inside if/try blocks (not functions/classes)."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try | ast.TryStar):
            blocks = (node.body, node.orelse, getattr(node, "finalbody", []),
                      *(h.body for h in getattr(node, "handlers", [])))
            for block in blocks:
                yield from top_level_statements(block)


def _bound_names(node: ast.Assign | ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    return [(a.asname or a.name).split(".")[0] for a in node.names]


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
