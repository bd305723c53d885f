"""Evolutionary mutation of a program's EVOLVE block, without an LLM.

Every edit rewrites source text in place at positions found with ``ast`` and ``tokenize``, so
comments and formatting survive and the head and tail of the program stay byte-identical. An
edit whose result does not compile (when the parent did) is discarded and another is drawn.
Most edits (~75%) perturb a numeric literal; the rest swap two adjacent independent
statements, flip an operator (``+``/``-``, ``<``/``<=``, ``min``/``max``), duplicate an
augmented assignment with a perturbed copy, or change a choice made without numbers (a string
option, a boolean, the order of a list: ``choices.py``), so a block without numeric literals
still has something to change. A block that is not Python (or does not parse) gets the edits
that work on text: literals, string options and booleans. Numbers inside ``knob(...)`` declarations belong to
Optuna and ``n_jobs=`` values to the task, so neither is ever perturbed. When the block builds a
scikit-learn pipeline with ``make_pipeline(...)`` and declares knobs, every mutation is a
structural move of the pipeline instead (see ``ml_moves``): its numbers are Optuna's.
"""

from __future__ import annotations

import ast
import io
import itertools
import math
import random
import re
import tokenize
import warnings
from collections.abc import Callable, Iterator

from evoforge.infra.artifacts.bundle import is_packed
from evoforge.infra.evolve_block import EditError, split_program
from evoforge.infra.offline.choices import edit_boolean, edit_choice, edit_reorder, flip_one
from evoforge.infra.offline.files import mutate_files
from evoforge.infra.offline.ml_moves import builds_pipeline, ml_move
from evoforge.infra.offline.mutation import Mutation
from evoforge.infra.offline.source import KNOB_FUNCTION, Number, ProgramView, char_col, replace_span

_KINDS = ("literal", "swap", "operator", "duplicate", "choice", "boolean", "reorder")
_KIND_WEIGHTS = (0.75, 0.08, 0.04, 0.04, 0.04, 0.03, 0.02)
_TEXT_KINDS = ("literal", "choice", "boolean")  # the edits that need no parse
_MORE_EDITS_P = 0.35  # chance of each further edit after the first
# a program whose numbers are knobs has only structure left to change: the other edits could only
# reorder its statements (measured: 2 of 3 digits children were a swap of two knob declarations)
_PIPELINE_MOVE_P = 1.0  # chance of a structural pipeline move, when the program has a pipeline
_ATTEMPTS = 12
_SIMPLE_STMTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)
_FLIPS = {
    "+": "-",
    "-": "+",
    "<": "<=",
    "<=": "<",
    ">": ">=",
    ">=": ">",
    "min": "max",
    "max": "min",
}
_UNTUNABLE_TEXT = re.compile(r"0[xob]|.*[jJ]$", re.IGNORECASE)  # bit patterns, complex numbers
_COMPARE_SYMBOLS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


def mutate_program(code: str, rng: random.Random, max_edits: int = 3) -> Mutation:
    """Apply 1..max_edits random edits to the EVOLVE block of ``code``; never returns ``code``.
    Packed files (a ``files`` task) get the edits in one of their files."""
    if max_edits < 1:
        raise ValueError(f"max_edits must be at least 1, got {max_edits}")
    if is_packed(code):
        return mutate_files(code, rng, lambda text: mutate_program(text, rng, max_edits))
    split = split_program(code)
    move = _pipeline_move(code, rng, _PIPELINE_MOVE_P)
    if move is not None:
        return move
    for _ in range(_ATTEMPTS):
        edits = 1
        while edits < max_edits and rng.random() < _MORE_EDITS_P:
            edits += 1
        current, notes = code, []
        for _ in range(edits):
            result = _one_edit(current, rng)
            if result is None:
                break
            current, note = result
            notes.append(note)
        changed = split_program(current)
        if current != code and (changed.head, changed.tail) == (split.head, split.tail):
            return Mutation(code=current, description="; ".join(notes))
    move = _pipeline_move(code, rng, 1.0)
    if move is not None:
        return move
    raise EditError("offline mutation found nothing to change in the EVOLVE block")


def _pipeline_move(code: str, rng: random.Random, p: float) -> Mutation | None:
    """With probability ``p``, a structural move of the block's sklearn pipeline; None without one."""
    if not builds_pipeline(code) or (p < 1 and rng.random() >= p):
        return None
    return ml_move(code, rng)


def _one_edit(code: str, rng: random.Random) -> tuple[str, str] | None:
    """One edit of a kind drawn by weight, falling back to the other kinds when it has no site."""
    view = ProgramView.of(code)
    for kind in _kinds_in_draw_order(rng, _KINDS if view.tree is not None else _TEXT_KINDS):
        for _ in range(3):
            result = _EDITORS[kind](view, rng)
            if result is None:
                break
            if view.tree is None or _compiles(result[0]):
                return result
    return None


def _kinds_in_draw_order(rng: random.Random, kinds: tuple[str, ...]) -> Iterator[str]:
    """The edit kinds, each drawn by weight from those not yet tried (drawn lazily)."""
    left = list(kinds)
    while left:
        kind = rng.choices(left, weights=[_KIND_WEIGHTS[_KINDS.index(k)] for k in left])[0]
        left.remove(kind)
        yield kind


def _edit_literal(view: ProgramView, rng: random.Random) -> tuple[str, str] | None:
    frozen = _owned_numbers(view.tokens)
    numbers = [
        n
        for n in view.numbers
        if view.first <= n.row <= view.last
        and n.tunable
        and (n.row, n.col) not in frozen
        and not _UNTUNABLE_TEXT.match(n.text)
    ]
    if not numbers:
        return None
    number = rng.choices(numbers, weights=[_literal_weight(n) for n in numbers])[0]
    new_text = perturb_number(number.text, rng)
    if new_text is None:
        return None
    verb = "scaled" if number.is_float else "changed"
    code = replace_span(view.lines, number.row, number.col, number.end_col, new_text)
    return code, f"{verb} literal {number.text} -> {new_text} (line {number.row})"


def _edit_swap(view: ProgramView, rng: random.Random) -> tuple[str, str] | None:
    pairs = [
        (a, b) for body in _bodies(view.tree) for a, b in itertools.pairwise(body) if _swappable(view, a, b)
    ]
    if not pairs:
        return None
    a, b = rng.choice(pairs)
    lines = view.lines
    first, mid, second = (
        lines[a.lineno - 1 : a.end_lineno],
        lines[a.end_lineno : b.lineno - 1],
        lines[b.lineno - 1 : b.end_lineno],
    )
    new_lines = lines[: a.lineno - 1] + second + mid + first + lines[b.end_lineno :]
    return "".join(new_lines), f"swapped statements at lines {a.lineno}-{b.end_lineno}"


def _edit_operator(view: ProgramView, rng: random.Random) -> tuple[str, str] | None:
    sites: list[tuple[int, int, int, str]] = []
    for node in ast.walk(view.tree):
        if not view.inside(node):
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            symbol = "+" if isinstance(node.op, ast.Add) else "-"
            sites += view.operator_between(node.left, node.right, symbol)
        elif isinstance(node, ast.Compare) and type(node.ops[0]) in _COMPARE_SYMBOLS:
            symbol = _COMPARE_SYMBOLS[type(node.ops[0])]
            sites += view.operator_between(node.left, node.comparators[0], symbol)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("min", "max"):
            col = char_col(view.lines[node.func.lineno - 1], node.func.col_offset)
            sites.append((node.func.lineno, col, col + 3, node.func.id))
    return flip_one(view, sites, _FLIPS, rng)


def _edit_duplicate(view: ProgramView, rng: random.Random) -> tuple[str, str] | None:
    sites = [
        node
        for node in ast.walk(view.tree)
        if isinstance(node, ast.AugAssign)
        and node.lineno == node.end_lineno
        and view.inside(node)
        and view.owns_lines(node)
        and not _declares_knob(node)
    ]
    if not sites:
        return None
    node = rng.choice(sites)
    line = view.lines[node.lineno - 1]
    copy = line if line.endswith("\n") else line + "\n"
    note = f"duplicated the update at line {node.lineno} (copy at line {node.lineno + 1}"
    numbers = [n for n in _line_numbers(copy) if n.tunable]
    if numbers:
        number = rng.choice(numbers)
        new_text = perturb_number(number.text, rng)
        if new_text is not None:
            copy = copy[: number.col] + new_text + copy[number.end_col :]
            note += f", {number.text} -> {new_text}"
    lines = view.lines[: node.lineno] + [copy] + view.lines[node.lineno :]
    if not view.lines[node.lineno - 1].endswith("\n"):
        lines[node.lineno - 1] += "\n"
    return "".join(lines), note + ")"


_EDITORS: dict[str, Callable[[ProgramView, random.Random], tuple[str, str] | None]] = {
    "literal": _edit_literal,
    "swap": _edit_swap,
    "operator": _edit_operator,
    "duplicate": _edit_duplicate,
    "choice": edit_choice,
    "boolean": edit_boolean,
    "reorder": edit_reorder,
}


def perturb_number(text: str, rng: random.Random) -> str | None:
    """A nearby value for the numeric literal ``text`` (same sign), or None to leave it alone."""
    if _UNTUNABLE_TEXT.match(text):
        return None
    value = ast.literal_eval(text)
    if isinstance(value, float):
        sigma = 0.5 if rng.random() < 0.15 else 0.07
        new = value * math.exp(rng.gauss(0.0, sigma)) if value else abs(rng.gauss(0.0, 0.1))
        return _format_float(new, text, value)
    if value >= 10:
        sigma = 0.3 if rng.random() < 0.15 else 0.1
        new_int = round(value * math.exp(rng.gauss(0.0, sigma)))
        new_int = new_int if new_int != value else value + rng.choice((-1, 1))
    else:
        step = rng.choice((-2, -1, -1, -1, 1, 1, 1, 2))
        new_int = value + step if value + step >= 1 else value + abs(step)
    return str(max(new_int, 1 if value >= 1 else 0))


def _literal_weight(number: Number) -> float:
    """Floats are the likeliest knobs; 0, 1 and 2 are mostly offsets and factors, not knobs."""
    if number.is_float:
        return 3.0
    return 1.0 if number.text.lstrip("0") not in ("", "1", "2") else 0.3


def _format_float(new: float, old_text: str, old: float) -> str | None:
    if not math.isfinite(new):
        return None
    digits = re.sub(r"[eE].*$", "", old_text).replace("_", "").replace(".", "").lstrip("0")
    for precision in range(max(2, len(digits)), 18):
        text = f"{new:.{precision}g}"
        if float(text) != old:
            return text if re.search(r"[.eE]", text) else text + ".0"
    return None


def _owned_numbers(tokens: list[tokenize.TokenInfo]) -> set[tuple[int, int]]:
    """(row, column) of the numbers inside ``knob(...)`` calls and of ``n_jobs=`` values."""
    owned: set[tuple[int, int]] = set()
    depth, recent = 0, ("", "")
    for tok in tokens:
        is_op = tok.type == tokenize.OP
        if depth:
            if is_op and tok.string in ("(", "[", "{"):
                depth += 1
            elif is_op and tok.string in (")", "]", "}"):
                depth -= 1
            elif tok.type == tokenize.NUMBER:
                owned.add(tok.start)
        elif is_op and tok.string == "(" and recent[1] == KNOB_FUNCTION:
            depth = 1
        elif tok.type == tokenize.NUMBER and recent == ("n_jobs", "="):
            owned.add(tok.start)
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            recent = (recent[1], tok.string)
    return owned


def _declares_knob(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == KNOB_FUNCTION
        for n in ast.walk(node)
    )


def _line_numbers(line: str) -> list[Number]:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.lstrip()).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    indent = len(line) - len(line.lstrip())
    return [
        Number(1, tok.start[1] + indent, tok.end[1] + indent, tok.string)
        for tok in tokens
        if tok.type == tokenize.NUMBER and tok.start[0] == 1
    ]


def _bodies(tree: ast.AST) -> list[list[ast.stmt]]:
    return [
        body
        for node in ast.walk(tree)
        for field in ("body", "orelse", "finalbody")
        if isinstance(body := getattr(node, field, None), list) and len(body) > 1
    ]


def _swappable(view: ProgramView, a: ast.stmt, b: ast.stmt) -> bool:
    if not (isinstance(a, _SIMPLE_STMTS) and isinstance(b, _SIMPLE_STMTS)):
        return False
    if isinstance(a, ast.Expr) and isinstance(a.value, ast.Constant):
        return False  # a docstring stays first
    if not (view.inside(a) and view.inside(b) and a.end_lineno < b.lineno):
        return False
    if not (view.owns_lines(a) and view.owns_lines(b)):
        return False
    written_a, touched_a = _names(a)
    written_b, touched_b = _names(b)
    return not (written_a & touched_b or written_b & touched_a)


def _names(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    """(names the statement may change, names it mentions) — conservatively."""
    touched = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    written = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    targets = getattr(stmt, "targets", None) or [getattr(stmt, "target", None)]
    written |= {_base_name(t) for t in targets if t is not None} - {None}
    if isinstance(stmt, ast.Expr):
        for call in (n for n in ast.walk(stmt) if isinstance(n, ast.Call)):
            receiver = _base_name(call.func) if isinstance(call.func, ast.Attribute) else None
            written.add(receiver or "<call>")
        touched |= written
    return written, touched


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _compiles(code: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, "<mutation>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True
