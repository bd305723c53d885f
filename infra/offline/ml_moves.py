"""Structural moves of the scikit-learn pipeline an EVOLVE block builds with ``make_pipeline(...)``.

A move swaps the final estimator, adds, removes or replaces a preprocessing step, or wraps the
estimator in (or unwraps it from) a bagging ensemble. The numbers of a new step are declared as
``knob(...)`` calls so that Optuna tunes them; the steps that stay keep their source text and
their knob declarations, and declarations and block imports that nothing uses any more are
dropped. Only the ``make_pipeline`` call, the summary line of its function's docstring and the
block's top-level imports and knob declarations change; the text outside the block is untouched.

>>> program = (
...     "# EVOLVE-BLOCK-START\\n"
...     "from sklearn.pipeline import make_pipeline\\n"
...     "from sklearn.preprocessing import StandardScaler\\n"
...     "from sklearn.svm import SVC\\n\\n"
...     "def knob(name, default, **_):\\n"
...     "    return default\\n\\n"
...     "def build_model():\\n"
...     "    return make_pipeline(StandardScaler(), SVC())\\n"
...     "# EVOLVE-BLOCK-END\\n"
... )
>>> import random
>>> move = ml_move(program, random.Random(0))
>>> "make_pipeline(" in move.code and move.description != ""
True
>>> ml_move("# EVOLVE-BLOCK-START\\nx = 1\\n# EVOLVE-BLOCK-END\\n", random.Random(0)) is None
True
"""

from __future__ import annotations

import ast
import random
import re
import warnings
from collections import defaultdict
from dataclasses import dataclass, replace

from evoforge.infra import pyast
from evoforge.infra.evolve_block import EditError, split_program
from evoforge.infra.offline.ml_catalogue import BAGGING, CATALOGUE, ESTIMATORS, TRANSFORMS, Kind
from evoforge.infra.offline.mutation import Mutation
from evoforge.infra.offline.source import char_col

_MAX_PREPROCESSING = 3
_ONE_LINE_WIDTH = 100
_SLOT = "\0estimator\0"  # where a wrapper's text holds the estimator it wraps
_DOCSTRING_START = re.compile(r'^(\s*[rRuU]?)("""|\'\'\')(.*?)(\s*)$')


_POLY, _PCA = "PolynomialFeatures", "PCA"


@dataclass(frozen=True)
class _Step:
    """One pipeline step: its class name (or source text), its source, and what a new step declares."""

    name: str
    text: str
    declarations: tuple[str, ...] = ()
    knob_names: tuple[str, ...] = ()

    @property
    def kind(self) -> Kind | None:
        return CATALOGUE.get(self.name)


@dataclass(frozen=True)
class _Pipeline:
    """Preprocessing steps, the final estimator, and the ensemble wrapping it (text with _SLOT), if any."""

    pre: tuple[_Step, ...]
    final: _Step
    ensemble: _Step | None = None

    def steps(self) -> tuple[_Step, ...]:
        return (*self.pre, self.final, *((self.ensemble,) if self.ensemble else ()))

    def final_text(self) -> str:
        return self.ensemble.text.replace(_SLOT, self.final.text) if self.ensemble else self.final.text

    def chain(self) -> str:
        final = f"BaggingClassifier({self.final.name})" if self.ensemble else self.final.name
        return " -> ".join((*(s.name for s in self.pre), final))


@dataclass(frozen=True)
class _Site:
    """Where the pipeline is built: the block's lines, its parse, and the ``make_pipeline`` call."""

    block: str
    tree: ast.Module
    call: ast.Call


class _Names:
    """Knob names and variables not yet used by the program."""

    def __init__(self, taken: set[str]) -> None:
        self._taken = set(taken)

    def fresh(self, base: str) -> str:
        name, n = base, 2
        while name in self._taken or name.upper() in self._taken:
            name, n = f"{base}_{n}", n + 1
        self._taken |= {name, name.upper()}
        return name


def builds_pipeline(program: str) -> bool:
    """True when ``ml_move`` applies: the block calls ``make_pipeline(...)`` and the program uses ``knob``."""
    return _site(program) is not None


def ml_move(program: str, rng: random.Random) -> Mutation | None:
    """A structural rewrite of the block's sklearn pipeline, or None (drawing nothing) when it has none."""
    site = _site(program)
    if site is None:
        return None
    split = split_program(program)
    names = _Names(_bound_names(pyast.parse(program)))
    pipe = _read_pipeline(site)
    moves = list(_MOVES)
    first = rng.choices(moves, weights=[w for _, w in moves])[0]
    for move, _ in (first, *(m for m in moves if m != first)):
        result = move(pipe, rng, names)
        if result is not None:
            new, dropped = _legal(result[0])
            note = result[1] + dropped
            try:
                code = split.join(_prune(split.head, _render(site, new, program), split.tail, site.block))
                compile(code, "<ml move>", "exec")
            except SyntaxError as exc:
                raise EditError(f"ml move '{note}' produced code that does not compile: {exc}") from exc
            return Mutation(code=code, description=note)
    raise EditError("no structural move applies to the pipeline")


def _site(program: str) -> _Site | None:
    block = split_program(program).block
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = pyast.parse(block)
            whole = pyast.parse(program)
    except SyntaxError:
        return None  # not parseable on its own (e.g. an indented block): not a pipeline we can rewrite
    if "knob" not in _bound_names(whole):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and _call_name(node) == "make_pipeline"
            and node.args
            and not any(isinstance(a, ast.Starred) for a in node.args)
            and all(k.arg is not None for k in node.keywords)
        ):
            return _Site(block, tree, node)
    return None


def _read_pipeline(site: _Site) -> _Pipeline:
    steps = [_read_step(site.block, arg) for arg in site.call.args]
    last = site.call.args[-1]
    if isinstance(last, ast.Call) and _call_name(last) == "BaggingClassifier":
        positional = last.args[0] if last.args else None
        inner = next((k.value for k in last.keywords if k.arg == "estimator"), positional)
        if isinstance(inner, ast.Call):
            final = _read_step(site.block, inner)
            wrapper = replace(steps[-1], text=steps[-1].text.replace(final.text, _SLOT, 1))
            return _Pipeline(tuple(steps[:-1]), final, wrapper)
    return _Pipeline(tuple(steps[:-1]), steps[-1])


def _read_step(block: str, node: ast.expr) -> _Step:
    text = ast.get_source_segment(block, node) or ast.unparse(node)
    name = _call_name(node) if isinstance(node, ast.Call) else None
    return _Step(name or text, text)


def _new_step(kind: Kind, names: _Names) -> _Step:
    args, declarations, knob_names = [], [], []
    for knob in kind.knobs:
        name = names.fresh(f"{kind.prefix}_{knob.suffix}")
        declarations.append(f'{name.upper()} = knob("{name}", {knob.spec})')
        args.append(f"{knob.param}={knob.template.format(name.upper())}")
        knob_names.append(name)
    args += [kind.fixed] if kind.fixed else []
    inner = [f"estimator={_SLOT}"] if kind is BAGGING else []
    return _Step(kind.cls, f"{kind.cls}({', '.join(inner + args)})", tuple(declarations), tuple(knob_names))


def _knob_note(step: _Step) -> str:
    return f" (knobs {', '.join(step.knob_names)})" if step.knob_names else ""


def _is_linear(pipe: _Pipeline) -> bool:
    kind = pipe.final.kind
    return kind is not None and kind.linear


def _fits(kind: Kind, pre: tuple[_Step, ...], pipe: _Pipeline) -> bool:
    """A preprocessing kind may join ``pre``: its rank is free, and feature expansion is affordable."""
    taken = {s.kind.rank for s in pre if s.kind is not None}
    return kind.rank not in taken and (kind.cls != _POLY or _expansion_fits(pre, pipe))


def _expansion_fits(pre: tuple[_Step, ...], pipe: _Pipeline) -> bool:
    """Pairwise features (~n²/2 columns) stay cheap only after PCA, into one linear model."""
    return _is_linear(pipe) and pipe.ensemble is None and any(s.name == _PCA for s in pre)


def _legal(pipe: _Pipeline) -> tuple[_Pipeline, str]:
    """``pipe`` without a PolynomialFeatures step that it can no longer afford, and a note saying so."""
    rest = tuple(s for s in pipe.pre if s.name != _POLY)
    if len(rest) == len(pipe.pre) or _expansion_fits(rest, pipe):
        return pipe, ""
    return replace(pipe, pre=rest), f"; drop {_POLY}, which needs PCA before it and one linear model after it"


def _insert(pre: tuple[_Step, ...], step: _Step, rank: int) -> tuple[tuple[_Step, ...], int]:
    index = next((i for i, s in enumerate(pre) if s.kind is not None and s.kind.rank > rank), len(pre))
    return (*pre[:index], step, *pre[index:]), index


def _swap(pipe: _Pipeline, rng: random.Random, names: _Names) -> tuple[_Pipeline, str] | None:
    options = [k for k in ESTIMATORS if k.cls != pipe.final.name and (pipe.ensemble is None or k.baggable)]
    kind = rng.choice(options)
    final = _new_step(kind, names)
    return replace(pipe, final=final), f"replace {pipe.final.name} with {kind.cls}{_knob_note(final)}"


def _add(pipe: _Pipeline, rng: random.Random, names: _Names) -> tuple[_Pipeline, str] | None:
    options = [k for k in TRANSFORMS if _fits(k, pipe.pre, pipe)]
    if len(pipe.pre) >= _MAX_PREPROCESSING or not options:
        return None
    step = _new_step(rng.choice(options), names)
    pre, index = _insert(pipe.pre, step, step.kind.rank)
    before = pre[index + 1].name if index + 1 < len(pre) else pipe.final.name
    return replace(pipe, pre=pre), f"add {step.name} before {before}{_knob_note(step)}"


def _remove(pipe: _Pipeline, rng: random.Random, names: _Names) -> tuple[_Pipeline, str] | None:
    if not pipe.pre:
        return None
    index = rng.randrange(len(pipe.pre))
    pre = (*pipe.pre[:index], *pipe.pre[index + 1 :])
    return replace(pipe, pre=pre), f"remove {pipe.pre[index].name} from the pipeline"


def _replace_step(pipe: _Pipeline, rng: random.Random, names: _Names) -> tuple[_Pipeline, str] | None:
    if not pipe.pre:
        return None
    index = rng.randrange(len(pipe.pre))
    old, rest = pipe.pre[index], (*pipe.pre[:index], *pipe.pre[index + 1 :])
    options = [k for k in TRANSFORMS if k.cls != old.name and _fits(k, rest, pipe)]
    if not options:
        return None
    step = _new_step(rng.choice(options), names)
    pre, _ = _insert(rest, step, step.kind.rank)
    return replace(pipe, pre=pre), f"replace {old.name} with {step.name}{_knob_note(step)}"


def _wrap(pipe: _Pipeline, rng: random.Random, names: _Names) -> tuple[_Pipeline, str] | None:
    baggable = pipe.final.kind is not None and pipe.final.kind.baggable
    if pipe.ensemble is not None or not baggable or any(s.name == _POLY for s in pipe.pre):
        return None
    ensemble = _new_step(BAGGING, names)
    note = f"wrap {pipe.final.name} in BaggingClassifier{_knob_note(ensemble)}"
    return replace(pipe, ensemble=ensemble), note


def _unwrap(pipe: _Pipeline, rng: random.Random, names: _Names) -> tuple[_Pipeline, str] | None:
    if pipe.ensemble is None:
        return None
    return replace(pipe, ensemble=None), f"unwrap {pipe.final.name} from its BaggingClassifier"


_MOVES = ((_swap, 0.40), (_add, 0.20), (_remove, 0.13), (_replace_step, 0.17), (_wrap, 0.05), (_unwrap, 0.05))


def _render(site: _Site, new: _Pipeline, program: str) -> str:
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
    new_imports = _import_lines(new, _bound_names(pyast.parse(program)))
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


def _call_text(site: _Site, pipe: _Pipeline, prefix: str, indent: int) -> str:
    func = ast.get_source_segment(site.block, site.call.func) or "make_pipeline"
    extra = [ast.get_source_segment(site.block, k) or ast.unparse(k) for k in site.call.keywords]
    args = [*(s.text for s in pipe.pre), pipe.final_text(), *extra]
    one_line = f"{func}({', '.join(args)})"
    if "\n" not in one_line and len(prefix) + len(one_line) + 1 <= _ONE_LINE_WIDTH:
        return one_line
    pad = " " * indent
    return f"{func}(\n" + "".join(f"{pad}    {a},\n" for a in args) + f"{pad})"


def _import_lines(pipe: _Pipeline, bound: set[str]) -> list[str]:
    by_module: dict[str, list[str]] = defaultdict(list)
    for step in pipe.steps():
        kind = step.kind
        if kind is not None and kind.cls not in bound and kind.cls not in by_module[kind.module]:
            by_module[kind.module].append(kind.cls)
    return [f"from {m} import {', '.join(sorted(c))}\n" for m, c in sorted(by_module.items()) if c]


def _docstring_summary(site: _Site, call_row: int) -> tuple[int, str]:
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


def _prune(head: str, block: str, tail: str, old_block: str) -> str:
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


def _bound_names(tree: ast.AST) -> set[str]:
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
