"""The artifact-kind contract: how one kind of evolvable thing is shown, edited, validated, diffed,
written for its evaluator and stored.

A task names its kind in `task.yaml` (`kind:`; an OpenEvolve folder is a `program`); the run
holds one instance of it, made for the task (`Task.artifact`). The artifact itself is always one
text (the node's `code`), so hashing for repeats and novelty, the node database and the sinks
need no kind of their own; the kind says how that text maps to files (`sources`). A new kind is a
new module with one subclass, and a line in `infra/artifacts/__init__.py`.
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar


@dataclass(frozen=True)
class Applied:
    """What an answer made of the parent: the new artifact and the answer's motivation."""

    code: str
    motivation: str


class ArtifactKind(ABC):
    """One kind of artifact, made for one task: its language, program file and evolvable files."""

    name: ClassVar[str]
    about: ClassVar[str]  # one line for `evoforge kinds` and the docs

    def __init__(self, *, language: str = "python", program_name: str = "",
                 files: tuple[str, ...] = ()) -> None:
        self.language, self.program_name, self.files = language, program_name, files

    @abstractmethod
    def show(self, artifact: str) -> str:
        """The prompt section that carries the artifact to be improved."""

    def answer_rules(self) -> str:
        """What the prompt adds to its answer-format instructions for this kind ('' for none)."""
        return ""

    @abstractmethod
    def apply(self, parent: str, answer: str) -> Applied:
        """The artifact an LLM answer makes of `parent`; EditError (the reason) when it cannot."""

    def merge(self, ancestor: str, ours: str, theirs: str) -> str | None:
        """An artifact with what `ours` and `theirs` each changed in their common `ancestor`
        (`ours`, the better of the two, wins where they clash); None when this kind cannot merge
        (GEPA's merge of two Pareto-front candidates)."""
        return None

    def evolvable(self, artifact: str) -> str:
        """What may change of the artifact (shown as an inspiration, judged, measured for features)."""
        return artifact

    @abstractmethod
    def sources(self, artifact: str) -> dict[str, str]:
        """Every evolvable file of the artifact, by its path in the task folder."""

    def target(self, workdir: Path) -> Path:
        """The path the task's evaluator receives (`evaluate(path)`) in an evaluation folder."""
        return workdir / self.program_name

    def write(self, artifact: str, initial: str, workdir: Path) -> None:
        """Write the artifact into `workdir`, a copy of the task folder: each evolvable file the
        candidate changed (a file it did not change stays the task's, byte for byte)."""
        before = self.sources(initial)
        for name, text in self.sources(artifact).items():
            if before.get(name) != text:
                (workdir / name).write_text(text, encoding="utf-8")

    def diff(self, old: str, new: str) -> str:
        """The change from `old` to `new` as a unified diff, file by file."""
        a, b = self.sources(old), self.sources(new)
        parts = []
        for name in dict.fromkeys([*a, *b]):
            parts += difflib.unified_diff(a.get(name, "").splitlines(True), b.get(name, "").splitlines(True),
                                          *self._diff_names(name), n=2)
        return "".join(parts)

    def stored(self, artifact: str) -> dict[str, str]:
        """The artifact as files to keep (a node's folder, `best/`, MLflow), by relative path."""
        return {f"files/{name}": text for name, text in self.sources(artifact).items()}

    def stored_root(self) -> str:
        """Where `stored` puts the artifact: the path (under `best/`) a user opens."""
        return "files"

    def names(self) -> tuple[str, ...]:
        """The paths of the evolvable files in the task folder."""
        return self.files or (self.program_name,)

    def python_sources(self, artifact: str) -> dict[str, str]:
        """The evolvable files that are Python (checked statically before evaluation)."""
        return {name: text for name, text in self.sources(artifact).items() if self.is_python(name)}

    def is_python(self, name: str) -> bool:
        """True when the evolvable file `name` is Python source."""
        return name.endswith(".py")

    def _diff_names(self, name: str) -> tuple[str, str]:
        return f"a/{name}", f"b/{name}"


class OneFile(ArtifactKind):
    """A kind whose artifact is one text file of the task (`program_name`), not Python source:
    kept under `files/`, never parsed as code."""

    def sources(self, artifact: str) -> dict[str, str]:
        return {self.program_name: artifact}

    def stored_root(self) -> str:
        return f"files/{self.program_name}"

    def is_python(self, name: str) -> bool:
        return False
