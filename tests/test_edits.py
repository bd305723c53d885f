"""The answer format: parsing SEARCH/REPLACE and rewrite answers, and applying them safely."""

from __future__ import annotations

import pytest

from evoforge.infra.edits import (
    KIND_DIFF,
    KIND_REWRITE,
    ParsedAnswer,
    SearchReplace,
    apply_answer,
    apply_diff,
    fence_code,
    make_diff,
    parse_answer,
    render_diff,
)
from evoforge.infra.evolve_block import EditError

PARENT = """import math

# EVOLVE-BLOCK-START
def score(x):
    scale = 0.5
    bias = 1
    return scale * math.sqrt(x) + bias
# EVOLVE-BLOCK-END


def main():
    return score(4.0)
"""

DIFF_ANSWER = """Lower the scale: the square root grows fast enough.

<<<<<<< SEARCH
    scale = 0.5
=======
    scale = 0.4
>>>>>>> REPLACE
"""


def test_parse_diff_reads_motivation_and_block() -> None:
    answer = parse_answer(DIFF_ANSWER)
    assert answer.kind == KIND_DIFF
    assert answer.motivation == "Lower the scale: the square root grows fast enough."
    assert answer.blocks == (SearchReplace("    scale = 0.5\n", "    scale = 0.4\n"),)
    assert answer.code is None


def test_parse_multiple_blocks_inside_a_fence() -> None:
    text = (
        "Two tweaks.\n\n```python\n"
        "<<<<<<< SEARCH\n    scale = 0.5\n=======\n    scale = 0.6\n>>>>>>> REPLACE\n"
        "<<<<<<< SEARCH\n    bias = 1\n=======\n    bias = 2\n>>>>>>> REPLACE\n```\n"
    )
    answer = parse_answer(text)
    assert answer.motivation == "Two tweaks."
    assert [b.replace for b in answer.blocks] == ["    scale = 0.6\n", "    bias = 2\n"]
    new = apply_answer(PARENT, answer)
    assert "scale = 0.6" in new and "bias = 2" in new


def test_parse_rewrite_takes_the_longest_fenced_block() -> None:
    program = PARENT.replace("0.5", "0.7")
    text = f"Use `x` like this:\n```python\nscore(1)\n```\nFull program:\n{fence_code(program)}"
    answer = parse_answer(text)
    assert answer.kind == KIND_REWRITE
    assert answer.motivation == "Use `x` like this:"
    assert answer.code == program
    assert apply_answer(PARENT, answer) == program


def test_render_diff_round_trips_through_parse() -> None:
    blocks = (SearchReplace("a = 1\n", "a = 2\n"), SearchReplace("b = 1", ""))
    parsed = parse_answer("why\n\n" + render_diff(blocks))
    assert parsed.blocks == (SearchReplace("a = 1\n", "a = 2\n"), SearchReplace("b = 1\n", ""))


def test_fence_code_outgrows_backticks_inside_the_program() -> None:
    program = 'DOC = """\n```\nexample\n```\n"""\nx = 1\n'
    assert parse_answer("new program:\n" + fence_code(program)).code == program


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty answer"),
        ("   \n\n", "empty answer"),
        ("I would tune the scale a bit.", "no SEARCH/REPLACE block and no fenced code block"),
        ("<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n", "unterminated SEARCH/REPLACE block 1"),
        ("<<<<<<< SEARCH\nx = 1\n>>>>>>> REPLACE\n", "no '=======' divider"),
        ("```python\nx = 1\n", "unterminated fenced code block"),
        ("```python\n\n```\n", "fenced code block in the answer is empty"),
    ],
)
def test_parse_rejects_answers_without_a_usable_edit(text: str, reason: str) -> None:
    with pytest.raises(EditError, match=reason):
        parse_answer(text)


def test_apply_diff_applies_blocks_in_order() -> None:
    code = "a = 1\nb = 2\nc = 3\n"
    blocks = [SearchReplace("a = 1\n", "a = 10\n"), SearchReplace("a = 10\nb = 2\n", "b = 20\n")]
    assert apply_diff(code, blocks) == "b = 20\nc = 3\n"


def test_apply_diff_tolerates_trailing_whitespace() -> None:
    code = "a = 1   \nb = 2\n"
    assert apply_diff(code, [SearchReplace("a = 1\n", "a = 5\n")]) == "a = 5\nb = 2\n"


def test_apply_diff_matches_whole_lines_only() -> None:
    with pytest.raises(EditError, match="not found"):
        apply_diff("total = 1\n", [SearchReplace("tal = 1\n", "tal = 2\n")])


def test_search_not_found_names_the_block() -> None:
    blocks = [SearchReplace("    scale = 0.5\n", "    scale = 0.6\n"), SearchReplace("nope = 3\n", "")]
    with pytest.raises(EditError) as info:
        apply_diff(PARENT, blocks)
    assert str(info.value) == "SEARCH text of block 2 not found in the program: 'nope = 3'"


def test_ambiguous_search_asks_for_context() -> None:
    with pytest.raises(EditError, match="block 1 matches 2 places"):
        apply_diff("x = 1\ny = 2\nx = 1\n", [SearchReplace("x = 1\n", "x = 3\n")])


def test_empty_search_is_rejected() -> None:
    with pytest.raises(EditError, match="SEARCH text of block 1 is empty"):
        apply_diff("x = 1\n", [SearchReplace("\n", "y = 2\n")])


def test_edit_outside_the_block_is_rejected() -> None:
    answer = parse_answer(
        "Use numpy.\n<<<<<<< SEARCH\nimport math\n=======\nimport numpy as math\n>>>>>>> REPLACE\n"
    )
    with pytest.raises(EditError, match="edit outside the EVOLVE block"):
        apply_answer(PARENT, answer)


def test_syntax_error_is_rejected_with_its_line() -> None:
    answer = ParsedAnswer(
        kind=KIND_DIFF,
        motivation="",
        blocks=(SearchReplace("    bias = 1\n", "    bias = (1\n"),),
    )
    with pytest.raises(EditError, match=r"candidate has a syntax error: .* \(line \d+\)"):
        apply_answer(PARENT, answer)


def test_no_op_answer_is_rejected() -> None:
    same = ParsedAnswer(kind=KIND_REWRITE, motivation="", code=PARENT + "\n\n")
    with pytest.raises(EditError, match="the answer does not change the program"):
        apply_answer(PARENT, same)
    noop_diff = parse_answer("x\n" + render_diff([SearchReplace("    bias = 1\n", "    bias = 1\n")]))
    with pytest.raises(EditError, match="does not change"):
        apply_answer(PARENT, noop_diff)


def test_rewrite_without_markers_is_spliced_into_the_block() -> None:
    body = "def score(x):\n    return 2 * math.sqrt(x)\n"
    answer = parse_answer(f"Simpler.\n\n{fence_code(body)}")
    new = apply_answer(PARENT, answer)
    assert new.startswith("import math\n\n# EVOLVE-BLOCK-START\ndef score(x):\n    return 2 *")
    assert new.endswith("# EVOLVE-BLOCK-END\n\n\ndef main():\n    return score(4.0)\n")


def test_rewrite_that_changes_the_frozen_tail_is_rejected() -> None:
    program = PARENT.replace("return score(4.0)", "return 99.0")
    with pytest.raises(EditError, match="after EVOLVE-BLOCK-END changed"):
        apply_answer(PARENT, parse_answer(fence_code(program)))


def test_rewrite_that_drops_one_marker_is_rejected() -> None:
    program = PARENT.replace("# EVOLVE-BLOCK-END\n", "")
    with pytest.raises(EditError, match="broke the EVOLVE markers"):
        apply_answer(PARENT, parse_answer(fence_code(program)))


def test_non_python_programs_skip_the_syntax_check() -> None:
    prompt = "# EVOLVE-BLOCK-START\nYou are a helpful solver.\n# EVOLVE-BLOCK-END\n"
    answer = parse_answer(
        render_diff([SearchReplace("You are a helpful solver.\n", "Think step by step (.\n")])
    )
    assert "step by step (" in apply_answer(prompt, answer, language="text")


@pytest.mark.parametrize(
    "new",
    [
        PARENT.replace("0.5", "0.55"),
        PARENT.replace("    bias = 1\n", "    bias = 1\n    bias += 0.5\n"),
        PARENT.replace("    scale = 0.5\n    bias = 1\n", "    bias = 1\n    scale = 0.5\n"),
        PARENT.replace("    scale = 0.5\n", ""),
        "x = 1\n" * 5 + "y = 2\n" + "x = 1\n" * 5,
    ],
)
def test_make_diff_round_trips(new: str) -> None:
    parent = PARENT if "score" in new else "x = 1\n" * 11
    blocks = make_diff(parent, new)
    assert apply_diff(parent, parse_answer(render_diff(blocks)).blocks) == new
