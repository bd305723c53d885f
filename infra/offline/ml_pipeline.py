"""The scikit-learn pipeline an EVOLVE block builds with ``make_pipeline(...)``, as the offline
proposer's structural moves (infra/offline/ml_moves.py) see it: read from the block's source,
and written back into it with its imports, knob declarations and docstring summary kept true."""

from __future__ import annotations

import ast
import re
import warnings
from collections import defaultdict
from dataclasses import dataclass, replace

from evoforge.infra import pyast
from evoforge.infra.evolve_block import split_program
from evoforge.infra.offline.ml_catalogue import CATALOGUE, Kind
from evoforge.infra.offline.source import char_col

_ONE_LINE_WIDTH = 100
SLOT = "\0estimator\0"  # where a wrapper's text holds the estimator it wraps
_DOCSTRING_START = re.compile(r'^(\s*[rRuU]?)("""|\'\'\')(.*?)(\s*)$')


@dataclass(frozen=True)
class Step:
    """One pipeline step: its class name (or source text), its source, and what a new step declares."""

    name: str
    text: str
    declarations: tuple[str, ...] = ()
    knob_names: tuple[str, ...] = ()

    @property
    def kind(self) -> Kind | None:
        return CATALOGUE.get(self.name)


@dataclass(frozen=True)
class Pipeline:
    """Preprocessing steps, the final estimator, and the ensemble wrapping it (text with SLOT), if any."""

    pre: tuple[Step, ...]
    final: Step
    ensemble: Step | None = None

    def steps(self) -> tuple[Step, ...]:
        return (*self.pre, self.final, *((self.ensemble,) if self.ensemble else ()))

    def final_text(self) -> str:
        return self.ensemble.text.replace(SLOT, self.final.text) if self.ensemble else self.final.text

    def chain(self) -> str:
        final = f"BaggingClassifier({self.final.name})" if self.ensemble else self.final.name
        return " -> ".join((*(s.name for s in self.pre), final))


@dataclass(frozen=True)
class Site:
    """Where the pipeline is built: the block's lines, its parse, and the ``make_pipeline`` call."""

    block: str
    tree: ast.Module
    call: ast.Call


def find_site(program: str) -> Site | None:
    block = split_program(program).block
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = pyast.parse(block)
            whole = pyast.parse(program)
    except SyntaxError:
        return None  # not parseable on its own (e.g. an indented block): not a pipeline we can rewrite
    if "knob" not in bound_names(whole):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and _call_name(node) == "make_pipeline"
            and node.args
            and not any(isinstance(a, ast.Starred) for a in node.args)
            and all(k.arg is not None for k in node.keywords)
        ):
            return Site(block, tree, node)
    return None


def read_pipeline(site: Site) -> Pipeline:
    steps = [_read_step(site.block, arg) for arg in site.call.args]
    last = site.call.args[-1]
    if isinstance(last, ast.Call) and _call_name(last) == "BaggingClassifier":
        positional = last.args[0] if last.args else None
        inner = next((k.value for k in last.keywords if k.arg == "estimator"), positional)
        if isinstance(inner, ast.Call):
            final = _read_step(site.block, inner)
            wrapper = replace(steps[-1], text=steps[-1].text.replace(final.text, SLOT, 1))
            return Pipeline(tuple(steps[:-1]), final, wrapper)
    return Pipeline(tuple(steps[:-1]), steps[-1])


def _read_step(block: str, node: ast.expr) -> Step:
    text = ast.get_source_segment(block, node) or ast.unparse(node)
    name = _call_name(node) if isinstance(node, ast.Call) else None
    return Step(name or text, text)


def render(site: Site, new: Pipeline, program: str) -> str:
    """The block with the new ``make_pipeline`` call, its imports and the new steps' knob declarations."""
    lines = site.block.splitlines(keepends=True)
    call = site.call
    first, last = lines[call.lineno - 1], lines[call.end_lineno - 1]
    start, end = char_col(first, call.col_offset), char_col(last, call.end_col_offset)
    call_text = _call_text(site, new, first[:start], len(first) - len(first.lstrip()))
    inserts: dict[int, list[str]] = defaultdict(list)
    anchor = next(s.lineno for s in site.tree.body if s.lineno <= call.lineno <= s.end_lineno)
    imports = [s for s in site.tree.body if isinstance(s, ast.Import | ast.ImportFrom)]
    import_row = min(imports[-1].end_lineno + 1 if imports else site.tree.body[0].lineno, anchor)
    new_imports = _import_lines(new, bound_names(pyast.parse(program)))
    if new_imports:
        inserts[import_row] += new_imports + ([] if imports else ["\n"])
    before = [s for s in site.tree.body if s.end_lineno < anchor]
    knob_rows = [s.end_lineno + 1 for s in before if _knob_target(s)]
    defines_knob = [s.end_lineno + 1 for s in before if "knob" in _defined_names(s)]  # declare after it
    knob_row = max([import_row, *knob_rows, *defines_knob])
    declarations = [f"{d}\n" for s in new.steps() for d in s.declarations]
    if declarations and not knob_rows:  # a new group of declarations, set off by blank lines
        above = (inserts[knob_row] or lines[: knob_row - 1] or ["\n"])[-1]
        below = lines[knob_row - 1] if knob_row <= len(lines) else "\n"
        declarations = ["\n"] * bool(above.strip()) + declarations + ["\n"] * bool(below.strip())
    inserts[knob_row] += declarations
    doc_row, summary = _docstring_summary(site, call.lineno)
    out: list[str] = []
    for row, line in enumerate(lines, start=1):
        out += inserts.get(row, [])
        if call.lineno < row <= call.end_lineno:
            continue
        if row == doc_row:
            line = summary.replace("\0", f"A fresh, unfitted pipeline: {new.chain()}.")
        if row == call.lineno:
            line = first[:start] + call_text + last[end:]
        out.append(line)
    out += inserts.get(len(lines) + 1, [])
    return "".join(out)


def _call_text(site: Site, pipe: Pipeline, prefix: str, indent: int) -> str:
    func = ast.get_source_segment(site.block, site.call.func) or "make_pipeline"
    extra = [ast.get_source_segment(site.block, k) or ast.unparse(k) for k in site.call.keywords]
    args = [*(s.text for s in pipe.pre), pipe.final_text(), *extra]
    one_line = f"{func}({', '.join(args)})"
    if "\n" not in one_line and len(prefix) + len(one_line) + 1 <= _ONE_LINE_WIDTH:
        return one_line
    pad = " " * indent
    return f"{func}(\n" + "".join(f"{pad}    {a},\n" for a in args) + f"{pad})"


def _import_lines(pipe: Pipeline, bound: set[str]) -> list[str]:
    by_module: dict[str, list[str]] = defaultdict(list)
    for step in pipe.steps():
        kind = step.kind
        if kind is not None and kind.cls not in bound and kind.cls not in by_module[kind.module]:
            by_module[kind.module].append(kind.cls)
    return [f"from {m} import {', '.join(sorted(c))}\n" for m, c in sorted(by_module.items()) if c]


def _docstring_summary(site: Site, call_row: int) -> tuple[int, str]:
    """The row of the enclosing function's one-line docstring summary and its line (\\0 for the text)."""
    for node in ast.walk(site.tree):
        if not (isinstance(node, ast.FunctionDef) and node.lineno <= call_row <= node.end_lineno):
            continue
        doc = node.body[0]
        text = doc.value.value if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) else None
        if not isinstance(text, str):
            return 0, ""
        lines = site.block.splitlines(keepends=True)
        match = _DOCSTRING_START.match(lines[doc.lineno - 1])
        if match is None or doc.lineno >= call_row:
            return 0, ""
        lead, quote, rest, _ = match.groups()
        if rest.endswith(quote) and doc.end_lineno == doc.lineno:
            return doc.lineno, f"{lead}{quote}\0{quote}\n"
        following = lines[doc.lineno].strip() if doc.lineno < len(lines) else ""
        if rest and not rest.endswith(quote) and following in ("", quote):
            return doc.lineno, f"{lead}{quote}\0\n"
        return 0, ""
    return 0, ""


def prune(head: str, block: str, tail: str, old_block: str) -> str:
    """``block`` without knob declarations and sklearn imports of the block that nothing uses any more."""
    tree = pyast.parse(block)
    used = {n.id for n in ast.walk(pyast.parse(head + block + tail)) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}
    lines = block.splitlines(keepends=True)
    edits: dict[int, tuple[int, list[str]]] = {}
    for stmt in tree.body:
        target = _knob_target(stmt)
        if target is not None and target not in used:
            edits[stmt.lineno] = (stmt.end_lineno, [])
        elif isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("sklearn"):
            kept = [a for a in stmt.names if (a.asname or a.name) in used]
            if len(kept) < len(stmt.names):
                names = ", ".join(ast.unparse(a) for a in kept)
                line = [f"from {stmt.module} import {names}\n"] if kept else []
                edits[stmt.lineno] = (stmt.end_lineno, line)
    out: list[str] = []
    row = 1
    while row <= len(lines):
        if row not in edits:
            out.append(lines[row - 1])
            row += 1
            continue
        end, replacement = edits[row]
        out += replacement
        row = end + 1
        while not replacement and row <= len(lines) and not lines[row - 1].strip() and (
            not out or not out[-1].strip()
        ):
            row += 1  # a removed statement takes its now-doubled blank line with it
    if old_block[:1].strip() and out and not out[0].strip():
        out = out[1:]
    return "".join(out)


def _knob_target(stmt: ast.stmt) -> str | None:
    """The variable a top-level ``NAME = knob(...)`` declaration binds, else None."""
    if (
        isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(stmt.value, ast.Call)
        and _call_name(stmt.value) == "knob"
    ):
        return stmt.targets[0].id
    return None


def _defined_names(tree: ast.AST) -> set[str]:
    """The names that functions, classes and imports anywhere in ``tree`` define."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def bound_names(tree: ast.AST) -> set[str]:
    """Every name the program binds or mentions, and every knob name it declares."""
    names = _defined_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Call) and _call_name(node) == "knob" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
    return names


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
