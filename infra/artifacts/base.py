"""The artifact-kind contract: how one kind of evolvable thing is shown, edited, validated, diffed,
written for its evaluator and stored.

A task names its kind in `task.yaml` (`kind:`; an OpenEvolve folder is a `program`); the run
holds one instance of it, made for the task (`Task.artifact`). The artifact itself is always one
text (the node's `code`), so hashing for repeats and novelty, the node database and the sinks
need no kind of their own; the kind says how that text maps to files (`sources`). A kind owns its
`task.yaml` keys (`task_keys`, checked by `read_task_keys`) and reads its seed (`read_seed`). A
new kind is a new module with one subclass, registered as a plug-in (an entry point named
`kind.*`, or a `--plugin` file; docs/extend/artifact-kind.md); `evoforge kinds` lists them.
"""

from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from evoforge.infra.prompt_format import search_replace_example


@dataclass(frozen=True)
class Applied:
    """What an answer made of the parent: the new artifact and the answer's motivation."""

    code: str
    motivation: str


class ArtifactKind(ABC):
    """One kind of artifact, made for one task: its language, program file and evolvable files."""

    name: ClassVar[str]
    about: ClassVar[str]  # one line for `evoforge kinds` (and `evoforge plugins`) and the docs
    noun: ClassVar[str] = "program"  # what every prompt calls the artifact ("prompt", "playbook", ...)
    expert: ClassVar[str] = "an expert researcher and engineer"  # who the system message addresses
    evolvable_part: ClassVar[str] = ""  # what `evolvable` shows, when not all of it ("its EVOLVE block")
    task_keys: ClassVar[Mapping[str, str]] = {}  # its own task.yaml keys -> what each one holds
    required_keys: ClassVar[tuple[str, ...]] = ()  # of those, the ones a task of this kind must set
    seed_key: ClassVar[str | None] = None  # the key naming the one file the seed is (None: several)
    runs_on_task_model: ClassVar[bool] = False  # scored by running it with a task model on cases

    def __init__(self, *, language: str = "python", program_name: str = "",
                 files: tuple[str, ...] = ()) -> None:
        self.language, self.program_name, self.files = language, program_name, files

    @classmethod
    def read_task_keys(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """Its own `task.yaml` keys (those the file sets), checked and typed; ValueError, one line
        naming the key, when a required one is missing or a value is bad (by default each value
        is a non-empty string: a file name)."""
        for key in cls.required_keys:
            if key not in values:
                raise ValueError(f"kind {cls.name} needs '{key}', {cls.task_keys[key]}")
        out = {}
        for key, value in values.items():
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{key} must be a non-empty string, got {value!r}")
            out[key] = value.strip()
        return out

    @classmethod
    def seed_files(cls, values: Mapping[str, Any]) -> tuple[str, ...]:
        """The evolvable files the task's checked keys name (none: the loader finds the program)."""
        return (values[cls.seed_key],) if cls.seed_key in values else ()

    @classmethod
    def read_seed(cls, root: Path, names: tuple[str, ...]) -> str:
        """The initial artifact from the task folder's files `names`; ValueError (one line naming
        the file) when it cannot be one."""
        (name,) = names
        try:
            return (root / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{name}: cannot read: {' '.join(str(exc).split())}") from None

    @abstractmethod
    def show(self, artifact: str) -> str:
        """The prompt section that carries the artifact to be improved."""

    def answer_rules(self) -> str:
        """What the prompt adds to its answer-format instructions for this kind ('' for none)."""
        return ""

    def fence(self) -> str:
        """The fence language the prompts show the artifact (and its inspirations) in."""
        return self.language

    def frozen_rule(self) -> str:
        """The sentence saying which part of the artifact is fixed ('' when all of it may change)."""
        return ""

    def system_rules(self) -> str:
        """The system message of the prompts that change the artifact (research, reflect, debug)."""
        article = "an" if self.noun[:1] in "aeiou" else "a"
        role = f"You are {self.expert} improving {article} {self.noun} through careful, testable changes."
        return " ".join(filter(None, [role, self.frozen_rule()]))

    def inspiration_header(self) -> str:
        """The heading over the other evaluated artifacts a research prompt shows."""
        return f"## Inspirations (other evaluated {self.noun}s)"

    def diff_form(self) -> str:
        """The diff answer form, as the `- diff:` item of the prompts' answer rules states it."""
        return (f"one or more SEARCH/REPLACE blocks. Each SEARCH part must match the current "
                f"{self.noun}\n  exactly (whitespace included) and appear in it once:\n\n"
                + search_replace_example(self.noun))

    def rewrite_form(self) -> str:
        """The rewrite answer form, as the `- rewrite:` item of the prompts' answer rules states it."""
        return f"the complete new {self.noun} in one ```{self.fence()} fenced block."

    def answer_forms(self) -> str:
        """The `## How to answer` section: both answer forms (the prompt's last line names one)."""
        return (f"## How to answer\nStart with one or two sentences of motivation: what you change and "
                f"why it should help. Then give\nthe change in the answer format named on the last line "
                f"of this message:\n\n- diff: {self.diff_form()}\n- rewrite: {self.rewrite_form()}\n")

    def edit_rules(self) -> str:
        """How to answer with an edit of the artifact shown (a reflection's patch, a repair)."""
        return (f"Start with one or two sentences of motivation: what you change and why it should "
                f"help.\nThen give {self.diff_form()}")

    def format_reminder(self, form: str) -> str:
        """The reminder after the answer format the prompt's last line names (`diff`, `rewrite`)."""
        if form == "diff":
            return "SEARCH/REPLACE blocks, as described above"
        return f"the complete {self.noun} in one fenced block, as described above"

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
