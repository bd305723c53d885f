"""Read and validate the settings files of a task folder: ``task.yaml`` (strict) and ``config.yaml``.

``read_task_yaml`` checks every key of ``task.yaml`` and turns the values into typed settings
(an unknown key or a bad value is a ``TaskError`` naming it); ``read_openevolve_config`` maps the
few OpenEvolve ``config.yaml`` keys evoforge uses and ignores the rest. ``task.py`` documents the
keys and combines the two into a ``Task``. Example::

    read_task_yaml(root)["levels"]  # (EvalLevel("pilot", 0.1), EvalLevel("full", None))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evoforge.infra.artifacts import KINDS, ArtifactKind, kind_class
from evoforge.infra.mlflow_registry import PROMPT_SCHEME, RegistryError, parse_prompt_uri

TASK_YAML = "task.yaml"
OPENEVOLVE_CONFIG = "config.yaml"
EVALUATOR = "evaluator.py"
DIRECTIONS = ("maximize", "minimize")
QUICK_TEST_TIMEOUT_S = 5.0
LEVEL_KEYS = {"pilot": ("data_fraction",), "full": (), "final": ()}  # names in evaluation order
RENAMED_KEYS = {"stages": "levels"}  # keys of earlier versions: refused, naming the new one
RENAMED_WHY = {"stages": "pilot, full and final are evaluation levels; a stage is a pipeline stage"}


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
class EvalLevel:
    """One evaluation level of a task; ``data_fraction`` is the share of training data it uses."""

    name: str
    data_fraction: float | None = None


DEFAULT_LEVELS = (EvalLevel("full"),)


def load_yaml(path: Path) -> Any:
    """The parsed YAML file, or a one-line ``TaskError`` naming where it is broken."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "parse error"
        raise TaskError(f"{path.name}: invalid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path.name}: cannot read: {one_line(exc)}") from None


def read_task_yaml(root: Path) -> dict[str, Any] | None:
    """Validate ``task.yaml`` strictly; None when the folder has none. The keys of the task's
    artifact kind (``files``, ``prompt``, ...) are the kind's to check (``ArtifactKind.task_keys``)."""
    path = root / TASK_YAML
    if not path.is_file():
        return None
    data = load_yaml(path) or {}
    if not isinstance(data, dict):
        raise TaskError(f"{TASK_YAML}: expected a mapping of keys, got {type(data).__name__}")
    kind = kind_class(_kind(data.get("kind", "program"), f"{TASK_YAML}: kind"))
    others = _kind_keys()
    for key in data:
        if key in RENAMED_KEYS:
            raise TaskError(f"{TASK_YAML}: '{key}' is now '{RENAMED_KEYS[key]}' ({RENAMED_WHY[key]})")
        if key in _TASK_FIELDS or key in kind.task_keys:
            continue
        if key in others:
            raise TaskError(f"{TASK_YAML}: '{key}' is for kind {', '.join(others[key])} (this task's kind "
                            f"is {kind.name})")
        allowed = [*_TASK_FIELDS, *others]  # the kinds' keys too: the reference lists them all
        raise TaskError(f"{TASK_YAML}: unknown key '{key}' (allowed: {', '.join(allowed)})")
    out = {key: _TASK_FIELDS[key](value, f"{TASK_YAML}: {key}")
           for key, value in data.items() if key in _TASK_FIELDS}
    try:
        out.update(kind.read_task_keys({key: data[key] for key in kind.task_keys if key in data}))
    except ValueError as exc:
        raise TaskError(f"{TASK_YAML}: {one_line(exc)}") from None
    _check_seed_file(out, kind, root)
    return out


def _kind_keys() -> dict[str, list[str]]:
    """Every registered kind's own task.yaml keys -> the kinds that own each."""
    owners: dict[str, list[str]] = {}
    for name in KINDS:
        for key in KINDS[name].task_keys:
            owners.setdefault(key, []).append(name)
    return owners


def _check_seed_file(out: dict[str, Any], kind: type[ArtifactKind], root: Path) -> None:
    """The file the kind's seed key names is in the task folder (or, for a kind run by a task
    model, a version in the workspace's MLflow Prompt Registry)."""
    key = kind.seed_key
    if key is None or key not in out:
        return
    if kind.runs_on_task_model and out[key].startswith(PROMPT_SCHEME):
        _check_prompt_uri(out[key], key)
    else:
        _check_program_name(out[key], root, key)


def read_openevolve_config(root: Path) -> dict[str, Any] | None:
    """Map the few OpenEvolve ``config.yaml`` keys evoforge uses; None when absent."""
    path = root / OPENEVOLVE_CONFIG
    if not path.is_file():
        return None
    data = load_yaml(path) or {}
    if not isinstance(data, dict):
        raise TaskError(f"{OPENEVOLVE_CONFIG}: expected a mapping, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for (section, key), (target, check) in _OPENEVOLVE_FIELDS.items():
        block = data if section is None else data.get(section)
        where = key if section is None else f"{section}.{key}"
        if isinstance(block, dict) and block.get(key) is not None:
            out[target] = check(block[key], f"{OPENEVOLVE_CONFIG}: {where}")
    return out


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (its type name when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TaskError(f"{where} must be a non-empty string, got {value!r}")
    return value.strip()


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise TaskError(f"{where} must be a string, got {type(value).__name__}")
    return value.strip()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _timeout(value: Any, where: str) -> float:
    if not _number(value) or not value > 0:
        raise TaskError(f"{where} must be a positive number of seconds, got {value!r}")
    return float(value)


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise TaskError(f"{where} must be true or false, got {value!r}")
    return value


def _numbers(value: Any, where: str) -> tuple[float, ...]:
    if not isinstance(value, list) or not all(_number(v) for v in value):
        raise TaskError(f"{where} must be a list of numbers, got {value!r}")
    return tuple(float(v) for v in value)


def _objective(value: Any, where: str) -> dict[str, str]:
    value = _keys(value, where, ("metric", "direction"))
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
    names = ", ".join(allowed) or "none"
    if not isinstance(value, dict):
        raise TaskError(f"{where} must be a mapping with keys {names}, got {value!r}")
    for key in value:
        if key not in allowed:
            raise TaskError(f"{where}: unknown key '{key}' (allowed: {names})")
    return value


def _python_names(value: Any, where: str, dotted: bool = False) -> tuple[str, ...]:
    kind = "module names" if dotted else "Python names"
    if not isinstance(value, list) or not all(
        isinstance(v, str) and all(part.isidentifier() for part in (v.split(".") if dotted else [v]))
        for v in value
    ):
        raise TaskError(f"{where} must be a list of {kind}, got {value!r}")
    return tuple(value)


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TaskError(f"{where} must be a list of metric names, got {value!r}")
    return tuple(value)


def _language(value: Any, where: str) -> str:
    return _name(value, where).lower()


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


def _levels(value: Any, where: str) -> tuple[EvalLevel, ...]:
    value = _keys(value, where, tuple(LEVEL_KEYS))
    if "full" not in value:
        raise TaskError(f"{where}: 'full' is required (the evaluation on all training data)")
    return tuple(_level(name, value[name], f"{where}.{name}") for name in LEVEL_KEYS if name in value)


def _level(name: str, value: Any, where: str) -> EvalLevel:
    settings = _keys({} if value is None else value, where, LEVEL_KEYS[name])
    fraction = settings.get("data_fraction")
    if fraction is not None and (not _number(fraction) or not 0 < fraction <= 1):
        raise TaskError(f"{where}.data_fraction must be a number in (0, 1], got {fraction!r}")
    return EvalLevel(name, None if fraction is None else float(fraction))


def _kind(value: Any, where: str) -> str:
    kind = _name(value, where)
    if kind not in KINDS:
        raise TaskError(f"{where} must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def _check_prompt_uri(uri: str, key: str) -> None:
    try:
        parse_prompt_uri(uri)
    except RegistryError as exc:
        raise TaskError(f"{TASK_YAML}: {key}: {exc}") from None


def _check_program_name(name: str, root: Path, key: str = "program") -> None:
    if Path(name).name != name:
        raise TaskError(f"{TASK_YAML}: {key} must be a file name in the task folder, got {name!r}")
    if name == EVALUATOR:
        raise TaskError(f"{TASK_YAML}: {key} cannot be {EVALUATOR}")
    if not (root / name).is_file():
        raise TaskError(f"{TASK_YAML}: {key} '{name}' does not exist in {root}")


_TASK_FIELDS = {
    "name": _name,
    "description": _text,
    "timeout_s": _timeout,
    "objective": _objective,
    "cascade": _flag,
    "cascade_thresholds": _numbers,
    "cases": _flag,
    "constraints": _constraints,
    "quick_test": _quick_test,
    "levels": _levels,
    "kind": _kind,
    "task_model": _flag,
}
_OPENEVOLVE_FIELDS = {
    ("evaluator", "timeout"): ("timeout_s", _timeout),
    ("evaluator", "cascade_evaluation"): ("cascade", _flag),
    ("evaluator", "cascade_thresholds"): ("cascade_thresholds", _numbers),
    ("prompt", "system_message"): ("description", _text),
    ("database", "feature_dimensions"): ("feature_dimensions", _names),
    (None, "language"): ("language", _language),
}
