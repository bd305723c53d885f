"""The answer format: SEARCH/REPLACE blocks or one fenced full program, parsed and applied.

A diff answer carries aider/OpenEvolve-style blocks: a ``<<<<<<< SEARCH`` line, the exact old
lines, a ``=======`` line, the new lines, and a ``>>>>>>> REPLACE`` line.

Blocks apply in order, each to the program as the blocks before it left it. A SEARCH text
matches whole lines: first exactly (line endings aside), then, if that finds nothing, ignoring
trailing whitespace. It must match exactly one place; an ambiguous SEARCH is an error that asks
for more context rather than a guess at the first occurrence.
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from evoforge.infra.evolve_block import EditError, check_within_block, has_markers, split_program
from evoforge.infra.failure_reasons import EMPTY, MALFORMED, SYNTAX

KIND_DIFF = "diff"
KIND_REWRITE = "rewrite"

_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
_FENCE_OPEN = re.compile(r"^\s*(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
_FENCE_CLOSE = re.compile(r"^\s*(`{3,}|~{3,})\s*$")
_MERGE_GAP = 2  # changed regions this close together become one block


@dataclass(frozen=True)
class SearchReplace:
    """One edit: replace the lines ``search`` with the lines ``replace``."""

    search: str
    replace: str


@dataclass(frozen=True)
class ParsedAnswer:
    """An LLM answer split into its motivation and its edit (blocks, or a full program)."""

    kind: str  # KIND_DIFF | KIND_REWRITE
    motivation: str
    blocks: tuple[SearchReplace, ...] = ()
    code: str | None = None


def render_diff(blocks: Sequence[SearchReplace]) -> str:
    """The answer text for ``blocks``; ``parse_answer`` reads it back."""
    parts = []
    for block in blocks:
        parts.append(
            "<<<<<<< SEARCH\n"
            + _lines_text(block.search)
            + "=======\n"
            + _lines_text(block.replace)
            + ">>>>>>> REPLACE\n"
        )
    return "\n".join(parts)


def fence_code(code: str, language: str = "python") -> str:
    """``code`` in a fenced block whose fence is longer than any backtick run inside it."""
    longest = max((len(m.group()) for m in re.finditer(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{_lines_text(code)}{fence}\n"


def parse_answer(text: str) -> ParsedAnswer:
    """Split an answer into motivation and edit; raise EditError when it carries no usable edit."""
    if not text or not text.strip():
        raise EditError("empty answer", EMPTY)
    lines = text.replace("\r\n", "\n").splitlines(keepends=True)
    blocks, first_block = _parse_blocks(lines)
    fences = _parse_fences(lines) if not blocks else []
    starts = [i for i, line in enumerate(lines) if _FENCE_OPEN.match(line)]
    if first_block is not None:
        starts.append(first_block)
    motivation = "".join(lines[: min(starts)]).strip() if starts else text.strip()
    if blocks:
        return ParsedAnswer(kind=KIND_DIFF, motivation=motivation, blocks=tuple(blocks))
    if not fences:
        raise EditError("no SEARCH/REPLACE block and no fenced code block in the answer")
    code = max(fences, key=len)  # the full program is the longest fenced block
    if not code.strip():
        raise EditError("the fenced code block in the answer is empty", EMPTY)
    return ParsedAnswer(kind=KIND_REWRITE, motivation=motivation, code=code)


def apply_diff(code: str, blocks: Sequence[SearchReplace]) -> str:
    """Apply ``blocks`` in order; raise EditError naming the first block that does not match."""
    lines = code.splitlines(keepends=True)
    for number, block in enumerate(blocks, start=1):
        search = block.search.splitlines(keepends=True)
        if not any(line.strip() for line in search):
            raise EditError(f"SEARCH text of block {number} is empty (give at least one line)", MALFORMED)
        matches = _find(lines, search, strict=True) or _find(lines, search, strict=False)
        first = _quote(next(line for line in search if line.strip()))
        if not matches:
            raise EditError(f"SEARCH text of block {number} not found in the program: {first}", MALFORMED)
        if len(matches) > 1:
            raise EditError(
                f"SEARCH text of block {number} matches {len(matches)} places in the program: "
                f"{first} (add surrounding lines to make it unique)", MALFORMED
            )
        at = matches[0]
        lines[at : at + len(search)] = _lines_text(block.replace).splitlines(keepends=True)
    return "".join(lines)


def apply_answer(parent_code: str, answer: ParsedAnswer, *, language: str = "python") -> str:
    """The candidate program ``answer`` makes of ``parent_code``, or EditError saying why not.

    A rewrite without EVOLVE markers, for a parent that has them, is taken as the new block
    body and spliced between the parent's frozen head and tail.
    """
    if answer.kind == KIND_DIFF:
        new_code = apply_diff(parent_code, answer.blocks)
    elif answer.code is not None:
        new_code = answer.code
        if has_markers(parent_code) and not _mentions_markers(new_code):
            new_code = split_program(parent_code).join(new_code)
    else:
        raise EditError("the answer carries neither SEARCH/REPLACE blocks nor a program")
    if _same_text(parent_code, new_code):
        raise EditError("the answer does not change the program", EMPTY)
    check_within_block(parent_code, new_code)
    if language == "python":
        _check_syntax(new_code)
    return new_code


def make_diff(old_code: str, new_code: str) -> tuple[SearchReplace, ...]:
    """Minimal blocks that turn ``old_code`` into ``new_code`` under ``apply_diff``."""
    old = _lines_text(old_code).splitlines(keepends=True)
    new = _lines_text(new_code).splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    regions: list[list[int]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if regions and i1 - regions[-1][1] <= _MERGE_GAP:
            regions[-1][1], regions[-1][3] = i2, j2
        else:
            regions.append([i1, i2, j1, j2])
    current, shift, blocks = list(old), 0, []
    for i1, i2, j1, j2 in regions:
        start, end = i1 + shift, i2 + shift
        lo, hi = _unique_window(current, start, end)
        replace = current[lo:start] + new[j1:j2] + current[end:hi]
        blocks.append(SearchReplace("".join(current[lo:hi]), "".join(replace)))
        current[lo:hi] = replace
        shift += (j2 - j1) - (i2 - i1)
    return tuple(blocks)


def _unique_window(lines: list[str], start: int, end: int) -> tuple[int, int]:
    """Grow [start, end) by context lines until it has text and matches only itself."""
    lo, hi, grow_up = start, end, True
    while lo > 0 or hi < len(lines):
        window = lines[lo:hi]
        if any(line.strip() for line in window) and len(_find(lines, window, strict=True)) == 1:
            break
        if (grow_up and lo > 0) or hi >= len(lines):
            lo -= 1
        else:
            hi += 1
        grow_up = not grow_up
    return lo, hi


def _parse_blocks(lines: list[str]) -> tuple[list[SearchReplace], int | None]:
    blocks: list[SearchReplace] = []
    first: int | None = None
    i = 0
    while i < len(lines):
        if not _SEARCH.match(lines[i]):
            i += 1
            continue
        first = i if first is None else first
        number = len(blocks) + 1
        j = i + 1
        while j < len(lines) and not _DIVIDER.match(lines[j]):
            if _SEARCH.match(lines[j]) or _REPLACE.match(lines[j]):
                raise EditError(f"SEARCH/REPLACE block {number} has no '=======' divider", MALFORMED)
            j += 1
        k = j + 1
        while k < len(lines) and not _REPLACE.match(lines[k]):
            if _SEARCH.match(lines[k]):
                break
            k += 1
        if j >= len(lines) or k >= len(lines) or not _REPLACE.match(lines[k]):
            raise EditError(f"unterminated SEARCH/REPLACE block {number} (no '>>>>>>> REPLACE' line)")
        blocks.append(SearchReplace("".join(lines[i + 1 : j]), "".join(lines[j + 1 : k])))
        i = k + 1
    return blocks, first


def _parse_fences(lines: list[str]) -> list[str]:
    bodies = []
    i = 0
    while i < len(lines):
        opener = _FENCE_OPEN.match(lines[i])
        if not opener:
            i += 1
            continue
        fence = opener.group(1)
        j = i + 1
        while j < len(lines):
            closer = _FENCE_CLOSE.match(lines[j])
            if closer and closer.group(1)[0] == fence[0] and len(closer.group(1)) >= len(fence):
                break
            j += 1
        if j >= len(lines):
            raise EditError("unterminated fenced code block (no closing fence line)")
        bodies.append(_lines_text("".join(lines[i + 1 : j])))
        i = j + 1
    return bodies


def _find(lines: list[str], search: list[str], *, strict: bool) -> list[int]:
    """Start indices where ``search`` matches whole lines of ``lines``."""

    def norm(line: str) -> str:
        return line.rstrip("\r\n") if strict else line.rstrip()

    target = [norm(line) for line in search]
    normed = [norm(line) for line in lines]
    size = len(target)
    return [
        at
        for at in range(len(normed) - size + 1)
        if normed[at] == target[0] and normed[at : at + size] == target
    ]


def _check_syntax(code: str) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, "<candidate>", "exec")
    except SyntaxError as exc:
        raise EditError(f"candidate has a syntax error: {exc.msg} (line {exc.lineno})", SYNTAX) from None
    except ValueError as exc:  # e.g. null bytes in the source
        raise EditError(f"candidate cannot be compiled: {exc}", SYNTAX) from None


def _mentions_markers(code: str) -> bool:
    return "EVOLVE-BLOCK-START" in code or "EVOLVE-BLOCK-END" in code


def _same_text(a: str, b: str) -> bool:
    return [line.rstrip() for line in a.strip().splitlines()] == [
        line.rstrip() for line in b.strip().splitlines()
    ]


def _lines_text(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _quote(line: str, limit: int = 80) -> str:
    text = line.strip()
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
