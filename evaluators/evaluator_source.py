"""Read a task's evaluator.py without running it: its top-level callables and their parameters.

The loader (`task.py`) decides from these what the task supports (a cascade, cases, levels, a
quick test, a task model's functions); the guardrails reuse `top_level_statements`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from evoforge.evaluators.task_yaml import EVALUATOR, TaskError, one_line
from evoforge.infra import pyast

_SIGNATURES = {"evaluate": "evaluate(program_path)", "cases": "cases()",
               "run": "run(artifact, case, llm)", "metric": "metric(case, output)"}


def parse_source(code: str, name: str) -> ast.Module:
    """The parsed module, or a one-line TaskError naming the file and line of a syntax error."""
    try:
        return pyast.parse(code, filename=name)
    except SyntaxError as exc:
        raise TaskError(f"{name}: syntax error at line {exc.lineno}: {exc.msg}") from None


def evaluator_functions(path: Path, required: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Top-level callables of ``evaluator.py`` mapped to their parameter names; TaskError naming
    the first of `required` it lacks."""
    if not path.is_file():
        raise TaskError(f"no {EVALUATOR} in {path.parent} (it must define evaluate(program_path))")
    try:
        code = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{EVALUATOR}: cannot read: {one_line(exc)}") from None
    functions: dict[str, tuple[str, ...]] = {}
    for node in top_level_statements(parse_source(code, EVALUATOR).body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            params = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            functions[node.name] = tuple(params)
        elif isinstance(node, ast.Assign | ast.ImportFrom | ast.Import):
            for name in _bound_names(node):
                functions.setdefault(name, ())
    for name in required:
        if name not in functions:
            raise TaskError(f"{EVALUATOR}: no top-level function '{_SIGNATURES[name]}'")
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
