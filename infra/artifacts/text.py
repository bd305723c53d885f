"""`text`: a prompt or instruction file, evaluated by running it with a task model on cases.

The artifact is the file's text; an answer is SEARCH/REPLACE blocks over its lines or the whole
new text in one fenced block (a file with EVOLVE markers: only its block may change). The prompt
shows it fenced as `prompt`, so an answerer tells it from code.

    >>> kind = Text(program_name="prompt.md", language="text")
    >>> answer = ("Say it.\\n<<<<<<< SEARCH\\nBe brief.\\n=======\\n"
    ...           "Be brief. Start with 'Answer:'.\\n>>>>>>> REPLACE\\n")
    >>> kind.apply("You answer questions.\\nBe brief.\\n", answer).code
    "You answer questions.\\nBe brief. Start with 'Answer:'.\\n"
"""

from __future__ import annotations

from evoforge.infra.artifacts.base import Applied, OneFile
from evoforge.infra.artifacts.merge3 import merge3
from evoforge.infra.edits import apply_answer, parse_answer
from evoforge.infra.prompt_format import render_program_section

TEXT_FENCE = "prompt"  # the fence language of a text artifact in a prompt


class Text(OneFile):
    """A prompt or instruction file (the task's `prompt:`), run by a task model on its cases."""

    name = "text"
    about = "a prompt or instruction file, scored by running it with a task model on cases"

    noun = "prompt"
    expert = "an expert prompt engineer"
    task_keys = {"prompt": "the file of the prompt to evolve (or prompts:/NAME@ALIAS in MLflow)"}
    required_keys, seed_key = ("prompt",), "prompt"
    runs_on_task_model = True

    def show(self, artifact: str) -> str:
        return render_program_section(artifact, TEXT_FENCE, self.noun)

    def fence(self) -> str:
        return TEXT_FENCE

    def rewrite_form(self) -> str:
        return "the complete new prompt in one ```text fenced block (plain text, not code)."

    def answer_rules(self) -> str:
        return ("The prompt here is plain text given to a task model, not code: change its wording "
                "and instructions; the SEARCH part of a block matches whole lines of it.")

    def apply(self, parent: str, answer: str) -> Applied:
        parsed = parse_answer(answer)
        return Applied(apply_answer(parent, parsed, language="text"), parsed.motivation)

    def merge(self, ancestor: str, ours: str, theirs: str) -> str | None:
        return merge3(ancestor, ours, theirs)

