"""Offline edits of the choices an EVOLVE block makes without numbers: words, booleans, order.

- ``choice``: a short word-like string literal (``method = "bubble"``) becomes another quoted
  word on a line related to it: a line that quotes the same word or names the variable it is
  given to (``if method == "merge"`` in the frozen code, ``# one of "bubble", "quick"``).
- ``boolean``: ``True`` <-> ``False`` (``true``/``false``, ``TRUE``/``FALSE`` in other languages).
- ``reorder``: two adjacent elements of a list or tuple literal swap places.

A Python block is read with ``ast`` (docstrings, dict keys, subscripts and everything inside a
``knob(...)`` declaration, whose values belong to Optuna, are left alone); a
block in another language, or one that does not parse, is read line by line with comments
(``#``, ``//``) skipped. Each editor returns ``(new code, note)`` or None when it has no site.
"""

from __future__ import annotations

import ast
import random
import re
import tokenize

from evoforge.infra.offline.source import KNOB_FUNCTION, ProgramView, char_col, replace_span

_WORD = re.compile(r"[A-Za-z_][\w\-.]{0,39}")
_QUOTED = re.compile(r"(['\"])([A-Za-z_][\w\-.]{0,39})\1")
_DOUBLE_QUOTED = re.compile(r"\"([A-Za-z_][\w\-.]{0,39})\"")
_BOOLEAN_WORDS = re.compile(r"\b(True|False|true|false|TRUE|FALSE)\b")
_FLIP = {"True": "False", "False": "True", "true": "false", "false": "true", "TRUE": "FALSE",
         "FALSE": "TRUE"}
_COMMENT = re.compile(r"#|//")
_IDENT = re.compile(r"[A-Za-z_]\w*")

Span = tuple[int, int, int, str]  # (1-based row, start column, end column, text) on one line


def edit_choice(view: ProgramView, rng: random.Random) -> tuple[str, str] | None:
    """Replace a word-like string literal of the block by another word the program offers."""
    sites = _python_strings(view) if view.tree is not None else _text_strings(view)
    offered = _offered_words(view)
    options = [(site, _alternatives(view, site, offered)) for site in sites]
    options = [(site, words) for site, words in options if words]
    if not options:
        return None
    (row, col, end, old), words = rng.choice(options)
    new = rng.choice(words)
    quote = view.lines[row - 1][col]
    code = replace_span(view.lines, row, col + 1, end - 1, new)
    return code, f"changed choice {quote}{old}{quote} -> {quote}{new}{quote} (line {row})"


def edit_boolean(view: ProgramView, rng: random.Random) -> tuple[str, str] | None:
    """Flip one boolean literal of the block."""
    if view.tree is not None:
        owned = _knob_owned(view.tree)
        sites = [
            (node.lineno, char_col(view.lines[node.lineno - 1], node.col_offset),
             char_col(view.lines[node.lineno - 1], node.end_col_offset), str(node.value))
            for node in ast.walk(view.tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, bool) and view.inside(node)
            and id(node) not in owned
        ]
    else:
        sites = [(row, m.start(), m.end(), m.group()) for row, code in _code_lines(view)
                 for m in _BOOLEAN_WORDS.finditer(code)]
    return flip_one(view, sites, _FLIP, rng)


def flip_one(view: ProgramView, sites: list[Span], table: dict[str, str],
             rng: random.Random) -> tuple[str, str] | None:
    """Replace the text of one site, drawn at random, by its counterpart in ``table``."""
    if not sites:
        return None
    row, col, end, old = rng.choice(sites)
    new = table[old]
    return replace_span(view.lines, row, col, end, new), f"flipped {old} -> {new} (line {row})"


def edit_reorder(view: ProgramView, rng: random.Random) -> tuple[str, str] | None:
    """Swap two adjacent elements of a list or tuple literal in a Python block."""
    if view.tree is None:
        return None
    pairs = []
    owned = _knob_owned(view.tree)
    for node in ast.walk(view.tree):
        if (isinstance(node, ast.List | ast.Tuple) and view.inside(node) and len(node.elts) >= 2
                and id(node) not in owned):
            elts = [e for e in node.elts if not isinstance(e, ast.Starred)]
            if len(elts) == len(node.elts):
                pairs += [(a, b) for a, b in zip(elts, elts[1:], strict=False)
                          if ast.dump(a) != ast.dump(b)]
    if not pairs:
        return None
    a, b = rng.choice(pairs)
    code = "".join(view.lines)
    offsets = _row_offsets(view.lines)
    a_start, a_end = _offset(view, offsets, a.lineno, a.col_offset), _offset(view, offsets, a.end_lineno,
                                                                            a.end_col_offset)
    b_start, b_end = _offset(view, offsets, b.lineno, b.col_offset), _offset(view, offsets, b.end_lineno,
                                                                            b.end_col_offset)
    first, second = code[a_start:a_end], code[b_start:b_end]
    new_code = code[:a_start] + second + code[a_end:b_start] + first + code[b_end:]
    return new_code, f"swapped list elements {first} and {second} (line {a.lineno})"


def _python_strings(view: ProgramView) -> list[Span]:
    """Word-like string literals of the block that are values (not docstrings, keys, subscripts)."""
    assert view.tree is not None
    skip = _knob_owned(view.tree)
    for node in ast.walk(view.tree):
        if isinstance(node, ast.Expr):
            skip.add(id(node.value))
        elif isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
    sites = []
    for node in ast.walk(view.tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                and view.inside(node) and node.lineno == node.end_lineno
                and _WORD.fullmatch(node.value)):
            line = view.lines[node.lineno - 1]
            col, end = char_col(line, node.col_offset), char_col(line, node.end_col_offset)
            if _QUOTED.fullmatch(line[col:end]):
                sites.append((node.lineno, col, end, node.value))
    return sites


def _knob_owned(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``knob(...)`` calls: their values are the parameter space's."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id == KNOB_FUNCTION]
    return {id(inner) for call in calls for inner in ast.walk(call)}


def _text_strings(view: ProgramView) -> list[Span]:
    """Double-quoted word-like literals on the code part of the block's lines."""
    return [(row, m.start(), m.end(), m.group(1)) for row, code in _code_lines(view)
            for m in _DOUBLE_QUOTED.finditer(code)]


def _offered_words(view: ProgramView) -> list[tuple[int, str]]:
    """(row, word) of every quoted word of the program, in code or in comments (not docstrings)."""
    if view.tree is None:
        return [(row, m.group(2)) for row, line in enumerate(view.lines, start=1)
                for m in _QUOTED.finditer(line)]
    docstrings = {id(n.value) for n in ast.walk(view.tree) if isinstance(n, ast.Expr)}
    words = [(n.lineno, n.value) for n in ast.walk(view.tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
             and _WORD.fullmatch(n.value)]
    words += [(tok.start[0], m.group(2)) for tok in view.tokens if tok.type == tokenize.COMMENT
              for m in _QUOTED.finditer(tok.string)]
    return words


def _alternatives(view: ProgramView, site: Span, offered: list[tuple[int, str]]) -> list[str]:
    """The other words quoted on lines that quote the site's word or name its variable."""
    row, col, _, value = site
    names = _IDENT.findall(view.lines[row - 1][:col])[-1:]
    keys = [re.compile(rf"(['\"]){re.escape(value)}\1")] + [re.compile(rf"\b{n}\b") for n in names]
    related = {r for r, line in enumerate(view.lines, start=1) if any(k.search(line) for k in keys)}
    return list(dict.fromkeys(w for r, w in offered if r in related and w != value))


def _code_lines(view: ProgramView) -> list[tuple[int, str]]:
    """(row, text before any comment) of each line of the block."""
    out = []
    for row in range(view.first, view.last + 1):
        line = view.lines[row - 1]
        comment = _COMMENT.search(line)
        out.append((row, line[: comment.start()] if comment else line))
    return out


def _row_offsets(lines: list[str]) -> list[int]:
    offsets, total = [], 0
    for line in lines:
        offsets.append(total)
        total += len(line)
    return offsets


def _offset(view: ProgramView, offsets: list[int], row: int, byte_col: int) -> int:
    return offsets[row - 1] + char_col(view.lines[row - 1], byte_col)
