"""Fuzzing the answer parser (infra/edits.py): any text ends in an answer or an EditError, never
another exception, and a valid SEARCH/REPLACE answer applies exactly as written."""

from __future__ import annotations

import contextlib
import os
import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from evoforge.infra.edits import (
    KIND_DIFF,
    SearchReplace,
    apply_answer,
    apply_diff,
    fence_code,
    make_diff,
    parse_answer,
    render_diff,
)
from evoforge.infra.evolve_block import EditError

FUZZ = settings(max_examples=int(os.environ.get("EVOFORGE_FUZZ_EXAMPLES", "150")), deadline=None)
# str.splitlines() breaks at all of these, so a "line" holds none of them
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_MARKER = re.compile(r"^\s*(<{5,9}\s*SEARCH|={5,9}|>{5,9}\s*REPLACE|`{3,}|~{3,})")

line = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=_BREAKS), max_size=30)
plain_line = line.filter(lambda text: not _MARKER.match(text))
# answer-shaped noise: fragments of the format mixed with arbitrary lines, in any order
fragment = st.sampled_from([
    "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE", "```python", "```", "~~~", "<<<<< SEARCH",
    ">>>>>>>>> REPLACE", "# EVOLVE-BLOCK-START", "# EVOLVE-BLOCK-END", "    x = 1", "", "\x00",
])
answer_text = st.lists(st.one_of(fragment, line), max_size=25).map("\n".join) | st.text(max_size=400)

PARENT = "import math\n\n# EVOLVE-BLOCK-START\ndef f(x):\n    return x + 1\n# EVOLVE-BLOCK-END\n"


@FUZZ
@given(answer_text)
def test_parsing_any_text_gives_an_answer_or_an_edit_error(text: str) -> None:
    try:
        answer = parse_answer(text)
    except EditError as exc:
        assert str(exc)  # the reason recorded on the node
        return
    assert answer.blocks or answer.code  # an answer always carries an edit


@FUZZ
@given(answer_text)
def test_applying_any_parsed_text_gives_a_program_or_an_edit_error(text: str) -> None:
    try:
        new = apply_answer(PARENT, parse_answer(text))
    except EditError:
        return
    assert new.startswith("import math\n\n# EVOLVE-BLOCK-START\n")  # the frozen head is kept
    compile(new, "<candidate>", "exec")  # and what comes back is a program


@FUZZ
@given(st.lists(line, max_size=12).map("\n".join),
       st.lists(st.builds(SearchReplace, st.lists(line, max_size=4).map("\n".join),
                          st.lists(line, max_size=4).map("\n".join)), max_size=4))
def test_applying_any_blocks_to_any_code_gives_code_or_an_edit_error(code: str, blocks) -> None:
    with contextlib.suppress(EditError):
        assert isinstance(apply_diff(code, blocks), str)


@FUZZ
@given(st.lists(plain_line, min_size=1, max_size=15, unique=True), st.data())
def test_a_rendered_search_replace_block_round_trips_and_applies(lines: list[str], data) -> None:
    start = data.draw(st.integers(0, len(lines) - 1), label="start")
    end = data.draw(st.integers(start + 1, len(lines)), label="end")
    searched = lines[start:end]
    assume(any(text.strip() for text in searched))  # SEARCH needs a line with text
    # (two lines equal but for trailing blanks would let the lenient match find both)
    assume(len({text.rstrip() for text in lines}) == len(lines))
    replacement = data.draw(st.lists(plain_line, max_size=5), label="replacement")
    block = SearchReplace("".join(f"{t}\n" for t in searched), "".join(f"{t}\n" for t in replacement))
    answer = parse_answer("Motivation: try this.\n\n" + render_diff([block]))
    assert answer.kind == KIND_DIFF and answer.blocks == (block,)
    assert answer.motivation == "Motivation: try this."
    new = apply_diff("".join(f"{t}\n" for t in lines), answer.blocks)
    assert new == "".join(f"{t}\n" for t in lines[:start] + replacement + lines[end:])


@FUZZ
@given(st.lists(line, max_size=12), st.lists(line, max_size=12))
def test_make_diff_blocks_turn_the_old_code_into_the_new(old: list[str], new: list[str]) -> None:
    old_code, new_code = "".join(f"{t}\n" for t in old), "".join(f"{t}\n" for t in new)
    try:
        blocks = make_diff(old_code, new_code)
    except EditError:
        return
    if all(any(text.strip() for text in b.search.splitlines()) for b in blocks):
        assert apply_diff(old_code, blocks) == new_code


@FUZZ
@given(st.lists(plain_line, min_size=1, max_size=10))
def test_a_fenced_program_parses_back_as_itself(body: list[str]) -> None:
    code = "".join(f"{t}\n" for t in body)
    assume(code.strip())
    answer = parse_answer("Rewrite.\n" + fence_code(code))
    assert answer.code == code
