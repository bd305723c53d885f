"""Where things are in a program's source: its EVOLVE block rows, numbers, nodes and tokens."""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from dataclasses import dataclass, field

from evoforge.infra import pyast
from evoforge.infra.evolve_block import split_program

KNOB_FUNCTION = "knob"  # the call that declares a tunable value (stages/tuning/param_space.py)
_NUMBER_RE = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
_SEED_NAME = re.compile(r"seed|random_state", re.IGNORECASE)


@dataclass(frozen=True)
class Number:
    """A numeric literal at (1-based row, 0-based character columns) of the source."""

    row: int
    col: int
    end_col: int
    text: str
    tunable: bool = True

    @property
    def is_float(self) -> bool:
        return not self.text.lower().startswith("0x") and bool(re.search(r"[.eE]", self.text))


@dataclass
class ProgramView:
    """A program's lines, its EVOLVE block rows [first, last], and its parse (None if invalid)."""

    lines: list[str]
    first: int
    last: int
    tree: ast.Module | None
    tokens: list[tokenize.TokenInfo] = field(default_factory=list)
    numbers: list[Number] = field(default_factory=list)

    @classmethod
    def of(cls, code: str) -> ProgramView:
        split = split_program(code)
        head_rows = split.head.count("\n")
        view = cls(
            lines=code.splitlines(keepends=True),
            first=head_rows + 1,
            last=head_rows + len(split.block.splitlines()),
            tree=_parse(code),
        )
        view.tokens = _tokens(code) if view.tree is not None else []
        view.numbers = view._find_numbers(split.block, head_rows)
        return view

    def inside(self, node: ast.AST) -> bool:
        """True when ``node`` lies wholly within the EVOLVE block."""
        lineno, end = getattr(node, "lineno", 0), getattr(node, "end_lineno", None) or 0
        return self.first <= lineno and end <= self.last

    def owns_lines(self, node: ast.AST) -> bool:
        """True when no other code shares the lines of ``node`` (a trailing comment may)."""
        first = self.lines[node.lineno - 1]
        last = self.lines[node.end_lineno - 1]
        before = first[: char_col(first, node.col_offset)]
        after = last[char_col(last, node.end_col_offset) :].strip()
        return not before.strip() and (not after or after.startswith("#"))

    def operator_between(self, left: ast.AST, right: ast.AST, symbol: str) -> list[tuple[int, int, int, str]]:
        """The one ``symbol`` token between two operand nodes, as [(row, col, end_col, symbol)]."""
        start = (left.end_lineno, char_col(self.lines[left.end_lineno - 1], left.end_col_offset))
        stop = (right.lineno, char_col(self.lines[right.lineno - 1], right.col_offset))
        found = [
            (tok.start[0], tok.start[1], tok.end[1], symbol)
            for tok in self.tokens
            if tok.type == tokenize.OP and tok.string == symbol and start <= tok.start and tok.end <= stop
        ]
        return found if len(found) == 1 else []

    def _find_numbers(self, block: str, head_rows: int) -> list[Number]:
        fixed = _untunable_positions(self.tree, self.lines) if self.tree is not None else set()
        spans = [
            (tok.start[0], tok.start[1], tok.end[1], tok.string)
            for tok in self.tokens
            if tok.type == tokenize.NUMBER and tok.start[0] == tok.end[0]
        ]
        if self.tree is None:
            try:
                spans = [
                    (tok.start[0] + head_rows, tok.start[1], tok.end[1], tok.string)
                    for tok in _tokens(block, strict=True)
                    if tok.type == tokenize.NUMBER and tok.start[0] == tok.end[0]
                ]
            except (tokenize.TokenError, SyntaxError):
                spans = [
                    (row, m.start(), m.end(), m.group())
                    for row, line in enumerate(block.splitlines(), start=head_rows + 1)
                    for m in _NUMBER_RE.finditer(line)
                ]
        return [Number(row, col, end, text, tunable=(row, col) not in fixed) for row, col, end, text in spans]


def char_col(line: str, byte_col: int) -> int:
    """The character column of an ``ast`` (UTF-8 byte) column on ``line``."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def replace_span(lines: list[str], row: int, col: int, end_col: int, text: str) -> str:
    """The source with characters [col, end_col) of 1-based ``row`` replaced by ``text``."""
    edited = list(lines)
    line = edited[row - 1]
    edited[row - 1] = line[:col] + text + line[end_col:]
    return "".join(edited)


def is_seed_name(name: str) -> bool:
    """True for names of random seeds, whose literals are not worth tuning."""
    return bool(_SEED_NAME.search(name))


def _untunable_positions(tree: ast.Module, lines: list[str]) -> set[tuple[int, int]]:
    """Positions of numbers that are indices or random seeds rather than knobs."""
    frozen: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            frozen.append(node.slice)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if is_seed_name(name):
                frozen.extend(node.args)
            frozen.extend(k.value for k in node.keywords if k.arg and is_seed_name(k.arg))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and is_seed_name(t.id) for t in targets):
                frozen.append(node.value)
    return {
        (n.lineno, char_col(lines[n.lineno - 1], n.col_offset))
        for root in frozen
        if root is not None
        for n in ast.walk(root)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float))
    }


def _parse(code: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pyast.parse(code)
    except (SyntaxError, ValueError):
        return None


def _tokens(code: str, strict: bool = False) -> list[tokenize.TokenInfo]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        if strict:
            raise
        return []
