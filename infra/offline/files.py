"""Offline edits of packed files (a `files` task): one file mutated at a time, and the answer
written under that file's `### FILE:` line, as an LLM is asked to write it."""

from __future__ import annotations

import random
from collections.abc import Callable

from evoforge.infra.artifacts.bundle import FILE_LINE, pack, unpack
from evoforge.infra.edits import fence_code, make_diff, render_diff
from evoforge.infra.evolve_block import EditError
from evoforge.infra.offline.mutation import Mutation
from evoforge.infra.prompt_format import FORMAT_REWRITE


def mutate_files(code: str, rng: random.Random, mutate: Callable[[str], Mutation]) -> Mutation:
    """`mutate` applied to one of the packed files, drawn at random among those it can change."""
    files = unpack(code)
    names = list(files)
    rng.shuffle(names)
    reasons = []
    for name in names:
        try:
            mutation = mutate(files[name])
        except EditError as exc:
            reasons.append(f"{name}: {exc}")
            continue
        return Mutation(pack({**files, name: mutation.code}), f"in {name}: {mutation.description}")
    raise EditError("; ".join(reasons) or "no files")


def files_answer(parent: str, child: str, form: str) -> str:
    """The edit from `parent` to `child` (packed files): each changed file under its file line,
    as SEARCH/REPLACE blocks or (rewrite) the file's whole new text."""
    old, new = unpack(parent), unpack(child)
    parts = []
    for name, text in new.items():
        if text == old.get(name):
            continue
        body = fence_code(text) if form == FORMAT_REWRITE else render_diff(make_diff(old[name], text))
        parts.append(f"{FILE_LINE}{name}\n{body}")
    return "\n".join(parts)
