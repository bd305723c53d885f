"""Guardrails: cheap static checks of a candidate program before its expensive evaluation.

Pure functions of the candidate's code and its task, in this order: the program compiles; the
code outside the EVOLVE block is byte-for-byte the task's initial program; and the constraints
its ``task.yaml`` declares hold (``required_names`` defined at the top level, none of the
``forbidden_imports`` imported anywhere). The code is read with ``ast``, never imported or run.
The engineer fails a violating candidate with ``failed_stage = GUARD`` before any sandbox run.
Example::

    violation = static_violation(code, load_task("circle_packing"))
    str(violation)  # e.g. "static check: required name: 'run_packing' is not defined ..."
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass

from evoforge.evaluators.evaluator_source import top_level_statements
from evoforge.evaluators.task import Task
from evoforge.infra import pyast
from evoforge.infra.evolve_block import (
    END_MARKER,
    START_MARKER,
    EditError,
    has_markers,
    split_program,
)

GUARD = "guard"  # the failed_stage of a candidate the guardrails stopped
STATIC_PREFIX = "static check: "
QUICK_TEST_PREFIX = "quick test: "

RULE_SYNTAX = "syntax"
RULE_FROZEN = "outside the EVOLVE block"
RULE_REQUIRED = "required name"
RULE_FORBIDDEN = "forbidden import"
RULE_FILES = "files"


@dataclass(frozen=True)
class Violation:
    """The first rule a candidate breaks, and where."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{STATIC_PREFIX}{self.rule}: {self.detail}"


def static_violation(code: str, task: Task) -> Violation | None:
    """The first static rule ``code`` breaks as a candidate of ``task``, or None when it passes.

    Each evolvable file of the artifact (the program; a ``files`` task's listed files) is checked
    on its own (a Python one compiled, its frozen region compared), then the constraints over
    all the Python files: a required name defined at the top level of one, no forbidden import
    in any."""
    kind = task.artifact
    try:
        sources, initial = kind.sources(code), kind.sources(task.initial_code)
    except ValueError as exc:
        return Violation(RULE_FILES, f"the candidate's files cannot be read: {exc}")
    if list(sources) != list(initial):
        return Violation(RULE_FILES, f"the candidate has the files {', '.join(sources)}; the task's "
                                     f"are {', '.join(initial)}")
    named = len(sources) > 1 or task.kind != "program"
    trees: list[tuple[str, ast.Module]] = []
    for name, text in sources.items():
        where = f"{name}: " if named else ""
        if kind.is_python(name):
            tree = _parse(text, name or task.program_name)
            if isinstance(tree, Violation):
                return Violation(tree.rule, where + tree.detail)
            trees.append((where, tree))
        frozen = frozen_region_violation(text, initial[name])
        if frozen is not None:
            return Violation(frozen.rule, where + frozen.detail)
    if not trees:  # another language: its evaluator compiles it; only the frozen region is ours
        return None
    defined = set().union(*(defined_names(tree) for _, tree in trees))
    for name in task.constraints.required_names:
        if name not in defined:
            place = "of any of the project's files" if named else "of the program"
            return Violation(RULE_REQUIRED, f"'{name}' is not defined at the top level {place}")
    forbidden = task.constraints.forbidden_imports
    for where, tree in trees if forbidden else ():
        for line, module in imported_modules(tree):
            banned = next((f for f in forbidden
                           if module == f or module.startswith(f + ".")), None)
            if banned is not None:
                return Violation(RULE_FORBIDDEN, f"{where}the program imports '{module}' (line {line}); "
                                                 f"'{banned}' is forbidden by the task")
    return None


def frozen_region_violation(code: str, initial_code: str) -> Violation | None:
    """A violation when ``code`` differs from ``initial_code`` anywhere outside the EVOLVE block."""
    if has_markers(initial_code) and not has_markers(code):
        return Violation(RULE_FROZEN, f"the {START_MARKER}/{END_MARKER} markers are missing")
    try:
        new = split_program(code)
    except EditError as exc:
        return Violation(RULE_FROZEN, f"the EVOLVE markers are broken: {exc}")
    old = split_program(initial_code)
    if new.head != old.head:
        line = _first_difference(new.head, old.head)
        return Violation(RULE_FROZEN, f"line {line} (before {START_MARKER}) differs from the task's "
                                      f"initial program")
    if new.tail != old.tail:
        line = len((new.head + new.block).splitlines()) + _first_difference(new.tail, old.tail)
        return Violation(RULE_FROZEN, f"line {line} (from {END_MARKER} on) differs from the task's "
                                      f"initial program")
    return None


def defined_names(tree: ast.Module) -> set[str]:
    """Names bound at the top level of a module: functions, classes, assignments, imports."""
    names: set[str] = set()
    for stmt in top_level_statements(tree.body):
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                names |= _target_names(target)
        elif isinstance(stmt, ast.AnnAssign | ast.AugAssign) and getattr(stmt, "value", None) is not None:
            names |= _target_names(stmt.target)
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"}
    return names


def imported_modules(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, dotted module name) of every import anywhere in the module, in source order.

    ``from a import b`` yields ``a`` and ``a.b``; ``__import__("m")`` and
    ``importlib.import_module("m")`` with a literal name count too.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((node.lineno, first.value))
    return sorted(found)


def _parse(code: str, filename: str) -> ast.Module | Violation:
    try:
        tree = pyast.parse_program(code)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(tree, filename, "exec")  # the compiler's checks too ('return' outside a function)
        return tree
    except SyntaxError as exc:
        return Violation(RULE_SYNTAX, f"{exc.msg} (line {exc.lineno})")
    except ValueError as exc:  # e.g. null bytes in the source
        return Violation(RULE_SYNTAX, f"the program cannot be compiled: {exc}")


def _first_difference(a: str, b: str) -> int:
    """The 1-based number of the first line where ``a`` and ``b`` differ."""
    left, right = a.splitlines(keepends=True), b.splitlines(keepends=True)
    for number, (x, y) in enumerate(zip(left, right, strict=False), start=1):
        if x != y:
            return number
    return min(len(left), len(right)) + 1


def _target_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Tuple | ast.List):
        return set().union(*(_target_names(t) for t in target.elts))
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return set()


def _is_dynamic_import(func: ast.expr) -> bool:
    return ((isinstance(func, ast.Name) and func.id == "__import__")
            or (isinstance(func, ast.Attribute) and func.attr == "import_module"))
