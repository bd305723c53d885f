"""Turn a mutation into the answer text an LLM would have written (a diff or a full program)."""

from __future__ import annotations

from evoforge.infra.artifacts.bundle import is_packed
from evoforge.infra.edits import fence_code, make_diff, render_diff
from evoforge.infra.offline.files import files_answer
from evoforge.infra.offline.mutate import Mutation
from evoforge.infra.prompt_format import FORMAT_DIFF, FORMAT_REWRITE


def render_answer(parent_code: str, mutation: Mutation, form: str, preface: str) -> str:
    """``preface`` as the motivation, then SEARCH/REPLACE blocks (diff) or the fenced program
    (packed files: each changed file under its file line)."""
    if is_packed(parent_code) and form in (FORMAT_DIFF, FORMAT_REWRITE):
        return f"{preface}\n\n{files_answer(parent_code, mutation.code, form)}"
    if form == FORMAT_REWRITE:
        return f"{preface}\n\n{fence_code(mutation.code)}"
    if form != FORMAT_DIFF:
        raise ValueError(f"unknown answer form {form!r}; expected {FORMAT_DIFF!r} or {FORMAT_REWRITE!r}")
    return f"{preface}\n\n{render_diff(make_diff(parent_code, mutation.code))}"
