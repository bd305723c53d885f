"""The parameter space a candidate declares with ``knob(...)`` calls, read from its source with ``ast``.

A program names its tunable numbers instead of hard-coding them; evoforge reads the declarations
(never running the code) and lets Optuna choose the values:

>>> space = parse_space('''
... C = knob("C", 1.0, low=1e-3, high=1e3, log=True)
... kernel = knob("kernel", "rbf", choices=["rbf", "poly"])
... depth = knob("depth", 3, low=1, high=12)
... ''')
>>> space.names
('C', 'kernel', 'depth')
>>> space.defaults()
{'C': 1.0, 'kernel': 'rbf', 'depth': 3}
>>> [knob.kind for knob in space.knobs]
['float', 'categorical', 'int']
>>> hardcoded_values("model = SVC(C=0.5)\\n", owned=["C"])
['C=0.5 (line 1): a value the parameter space owns, hard-coded']
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from evoforge.infra import pyast
from evoforge.infra.evolve_block import split_program

KNOB_FUNCTION = "knob"
_KEYWORDS = ("low", "high", "log", "choices")


class SpaceError(ValueError):
    """A malformed ``knob(...)`` declaration; the message names the knob and its line."""


@dataclass(frozen=True)
class Knob:
    """One tunable value: its name, kind ("float", "int" or "categorical"), default and range."""

    name: str
    kind: str
    default: Any
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    choices: tuple[Any, ...] | None = None
    line: int = 0

    def same_spec(self, other: Knob) -> bool:
        """True when ``other`` declares the same knob (the line may differ)."""
        return replace(self, line=other.line) == other

    def distribution(self) -> BaseDistribution:
        """The Optuna distribution Optuna samples this knob from."""
        if self.kind == "categorical":
            return CategoricalDistribution(self.choices or ())
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log)
        return FloatDistribution(float(self.low), float(self.high), log=self.log)


@dataclass(frozen=True)
class ParamSpace:
    """The knobs one program declares, in the order they first appear."""

    knobs: tuple[Knob, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(knob.name for knob in self.knobs)

    @property
    def empty(self) -> bool:
        return not self.knobs

    def __bool__(self) -> bool:
        return bool(self.knobs)

    def defaults(self) -> dict[str, Any]:
        """The declared default of every knob, by name."""
        return {knob.name: knob.default for knob in self.knobs}

    def distributions(self) -> dict[str, BaseDistribution]:
        """The Optuna distribution of every knob, by name."""
        return {knob.name: knob.distribution() for knob in self.knobs}


@lru_cache(maxsize=4096)  # pure, and asked for the same program by several stages
def parse_space(code: str) -> ParamSpace:
    """Read every ``knob(...)`` call in ``code`` into a ParamSpace; raise SpaceError on a bad one."""
    knobs: dict[str, Knob] = {}
    tree = _parse(code)  # a program that does not parse is an error even without knobs
    if KNOB_FUNCTION not in code:  # no call can name it: skip the walk (the engineer's hot path)
        return ParamSpace(())
    for call in _knob_calls(tree):
        knob = _read_knob(call)
        seen = knobs.get(knob.name)
        if seen is None:
            knobs[knob.name] = knob
        elif not seen.same_spec(knob):
            raise SpaceError(
                f"knob {knob.name!r} (line {knob.line}): declared again with a different spec "
                f"than on line {seen.line}"
            )
    return ParamSpace(tuple(knobs.values()))


def hardcoded_values(code: str, owned: Iterable[str]) -> list[str]:
    """Flag numeric literals in the EVOLVE block bound to ``owned`` names that this code does not declare."""
    owned = set(owned)
    if not owned:  # nothing the parameter space owns: nothing to flag (no walk of the tree)
        return []
    tree = _parse(code)
    split = split_program(code)
    first = split.head.count("\n") + 1
    last = first + len(split.block.splitlines()) - 1
    declared = {_literal_name(call) for call in _knob_calls(tree)}
    names = owned - declared
    inside_knob = {id(kw) for call in _knob_calls(tree) for kw in call.keywords}
    flags: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        for name, value in _bindings(node, inside_knob):
            if name in names and _is_number(value) and first <= value.lineno <= last:
                text = ast.get_source_segment(code, value) or repr(ast.literal_eval(value))
                flags.append(
                    (
                        value.lineno,
                        f"{name}={text} (line {value.lineno}): a value the parameter space owns, hard-coded",
                    )
                )
    return [flag for _, flag in sorted(flags)]


def _parse(code: str) -> ast.Module:
    try:
        return pyast.parse_program(code)
    except SyntaxError as exc:
        raise SpaceError(f"the program does not parse (line {exc.lineno}): {exc.msg}") from exc


def _knob_calls(tree: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == KNOB_FUNCTION:
            yield node


def _literal_name(call: ast.Call) -> str | None:
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _bindings(node: ast.AST, skip: set[int]) -> Iterator[tuple[str, ast.expr]]:
    """``name=value`` keyword arguments and ``name = value`` assignments held by ``node``."""
    if isinstance(node, ast.Call):
        for kw in node.keywords:
            if kw.arg is not None and id(kw) not in skip:
                yield kw.arg, kw.value
    elif isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Name):
                yield target.id, node.value
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        yield node.target.id, node.value


def _is_number(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    )


def _read_knob(call: ast.Call) -> Knob:
    line = call.lineno
    name = _literal_name(call)
    if name is None:
        raise SpaceError(
            f"knob on line {line}: the first argument must be the knob's name as a string literal"
        )
    where = f"knob {name!r} (line {line})"
    if len(call.args) != 2 or any(isinstance(arg, ast.Starred) for arg in call.args):
        raise SpaceError(f"{where}: expected knob(name, default, ...) with two positional arguments")
    args: dict[str, Any] = {"default": _literal(call.args[1], where, "default")}
    for kw in call.keywords:
        if kw.arg is None:
            raise SpaceError(f"{where}: **keyword unpacking is not a literal declaration")
        if kw.arg not in _KEYWORDS:
            raise SpaceError(f"{where}: unknown keyword {kw.arg!r} (expected one of {', '.join(_KEYWORDS)})")
        args[kw.arg] = _literal(kw.value, where, kw.arg)
    return _build(name, line, where, **args)


def _literal(node: ast.expr, where: str, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError) as exc:
        raise SpaceError(f"{where}: {what} must be a literal ({exc})") from exc


def _build(
    name: str,
    line: int,
    where: str,
    default: Any,
    low: Any = None,
    high: Any = None,
    log: Any = False,
    choices: Any = None,
) -> Knob:
    if not isinstance(log, bool):
        raise SpaceError(f"{where}: log must be True or False, not {log!r}")
    if choices is not None:
        return _categorical(name, line, where, default, low, high, log, choices)
    if isinstance(default, bool) or not isinstance(default, int | float):
        raise SpaceError(f"{where}: a {type(default).__name__} default needs choices=[...]")
    if low is None or high is None:
        raise SpaceError(f"{where}: a numeric knob needs both low= and high=")
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, int | float):
            raise SpaceError(f"{where}: low and high must be numbers, not {bound!r}")
    kind = "int" if isinstance(default, int) else "float"
    if kind == "int" and not (isinstance(low, int) and isinstance(high, int)):
        raise SpaceError(f"{where}: an int default needs int low/high (write {default}.0 for a float knob)")
    if low >= high:
        raise SpaceError(f"{where}: low ({low}) must be below high ({high})")
    if not low <= default <= high:
        raise SpaceError(f"{where}: default {default} lies outside [{low}, {high}]")
    if log and low <= 0:
        raise SpaceError(f"{where}: log=True needs low > 0, got low={low}")
    if kind == "float":
        low, high, default = float(low), float(high), float(default)
    return Knob(name=name, kind=kind, default=default, low=low, high=high, log=log, line=line)


def _categorical(
    name: str, line: int, where: str, default: Any, low: Any, high: Any, log: bool, choices: Any
) -> Knob:
    if low is not None or high is not None or log:
        raise SpaceError(f"{where}: choices= cannot be combined with low=, high= or log=")
    if not isinstance(choices, list | tuple) or not choices:
        raise SpaceError(f"{where}: choices must be a non-empty list of literals")
    for choice in choices:
        if choice is not None and not isinstance(choice, bool | int | float | str):
            raise SpaceError(f"{where}: choice {choice!r} is not a None, bool, number or string")
    if not any(type(choice) is type(default) and choice == default for choice in choices):
        raise SpaceError(f"{where}: default {default!r} is not one of the choices {list(choices)!r}")
    return Knob(name=name, kind="categorical", default=default, choices=tuple(choices), line=line)
