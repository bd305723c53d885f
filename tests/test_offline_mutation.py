"""The offline proposer: real mutations of the EVOLVE block, answered the way an LLM would."""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter

import pytest

from evoforge.infra.edits import KIND_DIFF, KIND_REWRITE, apply_answer, parse_answer
from evoforge.infra.evolve_block import EditError, split_program
from evoforge.infra.llm.types import LLMError
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.infra.offline.mutate import Mutation, mutate_program, perturb_number
from evoforge.infra.prompt_format import render_program_section

PROGRAM = '''"""Circle packing: place 26 circles in the unit square, maximising the sum of radii."""

import numpy as np


# EVOLVE-BLOCK-START
def construct_packing(n: int = 26, seed: int = 42):
    """Place circles on a jittered grid, then shrink the radii until nothing overlaps."""
    rng = np.random.default_rng(seed)
    side = int(np.ceil(np.sqrt(n)))  # circles per row
    margin = 0.08  # keep away from the walls
    jitter = 0.015
    centers = []
    for i in range(n):
        row, col = divmod(i, side)
        x = margin + (1 - 2 * margin) * (col + 0.5) / side
        y = margin + (1 - 2 * margin) * (row + 0.5) / side
        centers.append((x + rng.normal(0, jitter), y + rng.normal(0, jitter)))
    centers = np.clip(np.array(centers), 0.01, 0.99)
    radii = np.full(n, 0.5 / side)
    # shrink until feasible
    for _ in range(200):
        radii *= 0.98
        walls = np.min(np.concatenate([centers, 1 - centers], axis=1), axis=1)
        radii = np.minimum(radii, walls)
        gaps = np.linalg.norm(centers[:, None] - centers[None], axis=-1)
        overlap = radii[:, None] + radii[None] > gaps + 1e-12
        np.fill_diagonal(overlap, False)
        if not overlap.any():
            break
    best = max(radii.sum(), 0.0)
    return centers, radii, best
# EVOLVE-BLOCK-END


def run_packing():
    """Entry point the evaluator calls."""
    centers, radii, _ = construct_packing()
    return centers, radii, float(radii.sum())
'''


def _prompt(program: str, form: str) -> list[dict[str, str]]:
    content = "Improve the packing.\n\n" + render_program_section(program) + f"\nAnswer format: {form}\n"
    return [{"role": "system", "content": "You evolve programs."}, {"role": "user", "content": content}]


def test_500_mutations_compile_keep_head_and_tail_and_change_the_program() -> None:
    rng = random.Random(2024)
    parent = split_program(PROGRAM)
    kinds: Counter[str] = Counter()
    for _ in range(500):
        mutation = mutate_program(PROGRAM, rng)
        compile(mutation.code, "<mutation>", "exec")
        child = split_program(mutation.code)
        assert (child.head, child.tail) == (parent.head, parent.tail)
        assert mutation.code != PROGRAM
        assert mutation.description
        kinds.update(note.split()[0] for note in mutation.description.split("; "))
    literal = kinds["scaled"] + kinds["changed"]
    assert literal / sum(kinds.values()) > 0.65, kinds
    assert kinds["swapped"] and kinds["flipped"] and kinds["duplicated"], kinds


def test_literal_edits_keep_comments_and_layout() -> None:
    rng = random.Random(7)
    for _ in range(100):
        mutation = mutate_program(PROGRAM, rng, max_edits=1)
        if not mutation.description.startswith(("scaled", "changed")):
            continue
        old, new = PROGRAM.splitlines(), mutation.code.splitlines()
        assert len(old) == len(new)
        changed = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
        assert len(changed) == 1
        row = int(re.search(r"\(line (\d+)\)", mutation.description).group(1))
        assert old[row - 1] == changed[0][0]


def test_same_seed_gives_the_same_sequence() -> None:
    first, second = random.Random(5), random.Random(5)
    runs = [[mutate_program(PROGRAM, rng) for _ in range(30)] for rng in (first, second)]
    assert runs[0] == runs[1]
    other = [mutate_program(PROGRAM, random.Random(6)) for _ in range(30)]
    assert other != runs[0]


def test_max_edits_one_makes_one_edit() -> None:
    rng = random.Random(3)
    for _ in range(50):
        assert "; " not in mutate_program(PROGRAM, rng, max_edits=1).description


def test_seed_literals_and_indices_are_left_alone() -> None:
    program = "# EVOLVE-BLOCK-START\nSEED = 42\nrate = 0.3\nfirst = data[0]\n# EVOLVE-BLOCK-END\n"
    rng = random.Random(0)
    for _ in range(100):
        code = mutate_program(program, rng, max_edits=1).code
        assert "SEED = 42" in code and "data[0]" in code


def test_perturbed_numbers_keep_their_sign_and_counts_stay_positive() -> None:
    rng = random.Random(11)
    for _ in range(300):
        assert int(perturb_number("1", rng)) >= 1
        assert int(perturb_number("0", rng)) >= 0
        assert 1 <= int(perturb_number("200", rng)) < 2000
        assert float(perturb_number("0.7", rng)) > 0
    assert perturb_number("0x1F", rng) is None


def test_block_inside_a_function_is_mutated_in_place() -> None:
    program = (
        "def f(x):\n    # EVOLVE-BLOCK-START\n    y = x * 0.5  # half\n    return y + 3\n"
        "    # EVOLVE-BLOCK-END\n\nprint(f(2))\n"
    )
    rng = random.Random(1)
    for _ in range(50):
        mutation = mutate_program(program, rng)
        compile(mutation.code, "<m>", "exec")
        assert split_program(mutation.code).tail == split_program(program).tail


def test_unparseable_program_falls_back_to_literal_edits() -> None:
    program = "intro text\n# EVOLVE-BLOCK-START\nUse 3 examples and temperature 0.7 (\n# EVOLVE-BLOCK-END\n"
    mutation = mutate_program(program, random.Random(0))
    assert mutation.code != program
    assert mutation.description.startswith(("scaled literal", "changed literal"))


def test_block_with_nothing_to_mutate_raises() -> None:
    with pytest.raises(EditError, match="nothing to change"):
        mutate_program("# EVOLVE-BLOCK-START\nprint('hi')\n# EVOLVE-BLOCK-END\n", random.Random(0))


@pytest.mark.parametrize("form", [KIND_DIFF, KIND_REWRITE])
def test_backend_answers_round_trip_through_parse_and_apply(form: str) -> None:
    async def run() -> None:
        for seed in range(60):
            backend = OfflineBackend(seed=seed)
            completion = await backend.complete(_prompt(PROGRAM, form), temperature=0.8, max_tokens=4096)
            await backend.close()
            expected: Mutation = mutate_program(PROGRAM, random.Random(seed))
            answer = parse_answer(completion.text)
            assert answer.kind == form
            assert answer.motivation == f"Offline proposer (no LLM): {expected.description}"
            assert apply_answer(PROGRAM, answer) == expected.code
            assert completion.text.startswith("Offline proposer (no LLM): ")
            assert (completion.tokens_in, completion.tokens_out) == (0, 0)
            assert completion.backend == "offline" and completion.model == "offline-mutator"
            assert completion.seconds >= 0

    asyncio.run(run())


def test_diff_answers_are_minimal_hunks() -> None:
    async def run() -> str:
        backend = OfflineBackend(seed=0, max_edits=1)
        return (await backend.complete(_prompt(PROGRAM, KIND_DIFF), temperature=1, max_tokens=99)).text

    blocks = parse_answer(asyncio.run(run())).blocks
    assert all(len(b.search.splitlines()) <= 4 for b in blocks)


def test_backend_without_a_program_in_the_prompt_raises() -> None:
    backend = OfflineBackend()
    messages = [{"role": "user", "content": "Please improve something."}]
    with pytest.raises(LLMError, match="carries no '## Current program' section"):
        asyncio.run(backend.complete(messages, temperature=1.0, max_tokens=100))


STRING_ONLY = '''# EVOLVE-BLOCK-START
method = "bubble"  # one of "bubble", "insertion", "merge"
reverse_first = False
order = ["cheap", "thorough"]
# EVOLVE-BLOCK-END
def run(xs):
    if method == "quick":
        return sorted(xs)
    return xs
'''


def test_block_without_numbers_gets_choice_boolean_and_order_edits() -> None:
    rng = random.Random(5)
    notes = [mutate_program(STRING_ONLY, rng, max_edits=1).description for _ in range(300)]
    kinds = Counter(re.sub(r" [\"'(].*", "", note) for note in notes)
    assert {"changed choice", "flipped False -> True", "swapped list elements"} <= set(kinds)
    options = {re.search(r'-> "(\w+)"', n).group(1) for n in notes if n.startswith("changed choice \"bubble")}
    assert options == {"insertion", "merge", "quick"}  # words the program offers for `method`
    assert not any("cheap\" -> \"bubble" in n for n in notes)  # unrelated words are not offered
    for _ in range(50):
        compile(mutate_program(STRING_ONLY, rng).code, "<m>", "exec")


def test_non_python_block_gets_text_edits_outside_comments() -> None:
    program = ('#include <stdio.h>\n// EVOLVE-BLOCK-START\nconst char *mode = "fast"; // "fast" or "exact"\n'
               "int verbose = false;\n// EVOLVE-BLOCK-END\nint main(void) { return 0; }\n")
    rng = random.Random(2)
    codes = {mutate_program(program, rng, max_edits=1).code for _ in range(100)}
    assert program.replace('*mode = "fast"', '*mode = "exact"') in codes
    assert program.replace("verbose = false", "verbose = true") in codes
    assert all(split_program(c).tail == split_program(program).tail for c in codes)
    assert all('// "fast" or "exact"' in c for c in codes)  # comments are left alone
