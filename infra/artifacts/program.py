"""`program`: one source file whose EVOLVE block evolves (OpenEvolve's format, any language).

The artifact is the program's text; an answer is SEARCH/REPLACE blocks or one fenced program
(`infra/edits.py`), which must leave the code outside the EVOLVE block as it was.

    >>> kind = Program(program_name="p.py")
    >>> parent = "# EVOLVE-BLOCK-START\\nx = 1\\n# EVOLVE-BLOCK-END\\n"
    >>> answer = "Raise it.\\n<<<<<<< SEARCH\\nx = 1\\n=======\\nx = 2\\n>>>>>>> REPLACE\\n"
    >>> kind.apply(parent, answer).code.splitlines()[1]
    'x = 2'
"""

from __future__ import annotations

from pathlib import Path

from evoforge.infra.artifacts.base import Applied, ArtifactKind
from evoforge.infra.edits import apply_answer, parse_answer
from evoforge.infra.evolve_block import END_MARKER, START_MARKER, EditError, split_program
from evoforge.infra.prompt_format import render_program_section


class Program(ArtifactKind):
    """A single program file with an EVOLVE block (the whole file when it has no markers)."""

    name = "program"
    about = "one source file; its EVOLVE block evolves (OpenEvolve's format, any language)"

    evolvable_part = "its EVOLVE block"
    task_keys = {"program": "the program file (default: initial_program.*, else the one .py file with "
                            "EVOLVE markers)"}
    seed_key = "program"

    @classmethod
    def read_seed(cls, root: Path, names: tuple[str, ...]) -> str:
        code = super().read_seed(root, names)
        if START_MARKER not in code and END_MARKER not in code:
            raise ValueError(f"{names[0]}: no {START_MARKER}/{END_MARKER} markers (mark the evolvable code)")
        try:
            split_program(code)
        except EditError as exc:
            raise ValueError(f"{names[0]}: {exc}") from None
        return code

    def show(self, artifact: str) -> str:
        return render_program_section(artifact, self.language)

    def frozen_rule(self) -> str:
        return ("Only the region between EVOLVE-BLOCK-START and EVOLVE-BLOCK-END may change; "
                "everything outside it is fixed and must stay byte-for-byte the same.")

    def inspiration_header(self) -> str:
        return "## Inspirations (EVOLVE blocks of other evaluated programs)"

    def rewrite_form(self) -> str:
        return (f"the complete new program in one ```{self.language} fenced block, keeping the EVOLVE "
                f"markers\n  and everything outside the EVOLVE block unchanged.")

    def apply(self, parent: str, answer: str) -> Applied:
        parsed = parse_answer(answer)
        return Applied(apply_answer(parent, parsed, language=self.language), parsed.motivation)

    def evolvable(self, artifact: str) -> str:
        try:
            return split_program(artifact).block
        except EditError:  # broken markers: all of it
            return artifact

    def sources(self, artifact: str) -> dict[str, str]:
        return {self.program_name: artifact}

    def stored(self, artifact: str) -> dict[str, str]:
        return {"program.py": artifact}

    def stored_root(self) -> str:
        return "program.py"

    def write(self, artifact: str, initial: str, workdir) -> None:
        (workdir / self.program_name).write_text(artifact, encoding="utf-8")

    def is_python(self, name: str) -> bool:
        return self.language == "python"

    def _diff_names(self, name: str) -> tuple[str, str]:
        return "parent", "candidate"
