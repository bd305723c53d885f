"""`files`: several files of a project folder evolve together; the evaluator gets the whole folder.

The task lists its evolvable files (`task.yaml`: `files:`); each one is wholly evolvable, or only
its EVOLVE block when it has the markers. The artifact is the files packed into one text
(`bundle.py`); the prompt shows them that way, and an answer puts each file's edits under a
`### FILE: <path>` line: SEARCH/REPLACE blocks edit that file, a fenced block replaces it (or
its EVOLVE block). A SEARCH block under no file line goes to the one file it matches. An edit
that names a file outside the list fails the candidate with that reason; the folder's other
files, and the listed files an answer leaves alone, reach the evaluator byte for byte.

    >>> kind = Files(files=("a.py", "b.py"))
    >>> parent = pack({"a.py": "x = 1\\n", "b.py": "y = 2\\n"})
    >>> answer = "Raise y.\\n### FILE: b.py\\n<<<<<<< SEARCH\\ny = 2\\n=======\\ny = 3\\n>>>>>>> REPLACE\\n"
    >>> applied = kind.apply(parent, answer)
    >>> unpack(applied.code), applied.motivation
    ({'a.py': 'x = 1\\n', 'b.py': 'y = 3\\n'}, 'Raise y.')
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evoforge.infra.artifacts.base import Applied, ArtifactKind
from evoforge.infra.artifacts.bundle import FILE_LINE, file_line, pack, unpack
from evoforge.infra.edits import (
    KIND_DIFF,
    ParsedAnswer,
    SearchReplace,
    apply_answer,
    apply_diff,
    parse_answer,
)
from evoforge.infra.evolve_block import EditError, has_markers, split_program
from evoforge.infra.failure_reasons import EMPTY, FROZEN, MALFORMED
from evoforge.infra.prompt_format import render_program_section, search_replace_example

EVALUATOR_FILE = "evaluator.py"  # the task folder's evaluator: never evolvable


class Files(ArtifactKind):
    """The evolvable files of a project folder, packed into one text."""

    name = "files"
    about = "several files of a project folder; the evaluator gets the whole folder"

    noun = "project"
    evolvable_part = "the evolvable part of each file"
    task_keys = {"files": "the list of evolvable files"}
    required_keys = ("files",)

    @classmethod
    def read_task_keys(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        if "files" not in values:
            raise ValueError(f"kind {cls.name} needs 'files', {cls.task_keys['files']}")
        value = values["files"]
        if (not isinstance(value, list) or not value
                or not all(isinstance(v, str) and v.strip() for v in value)):
            raise ValueError(f"files must be a non-empty list of file paths in the task folder, "
                             f"got {value!r}")
        names = tuple(v.strip() for v in value)
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"files: '{twice[0]}' is listed twice")
        if EVALUATOR_FILE in names:
            raise ValueError(f"files: {EVALUATOR_FILE} cannot evolve")
        return {"files": names}

    @classmethod
    def seed_files(cls, values: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(values["files"])

    @classmethod
    def read_seed(cls, root: Path, names: tuple[str, ...]) -> str:
        try:
            return load_files(root, names)
        except ValueError as exc:
            raise ValueError(f"task.yaml: files: {exc}") from None

    def show(self, artifact: str) -> str:
        return render_program_section(artifact, "text", self.noun)

    def fence(self) -> str:
        return "text"

    def frozen_rule(self) -> str:
        return ("In a file with EVOLVE-BLOCK-START and EVOLVE-BLOCK-END markers only the region "
                "between them may change; everything outside it must stay byte-for-byte the same.")

    def inspiration_header(self) -> str:
        return "## Inspirations (other evaluated projects: the evolvable part of each file)"

    def diff_form(self) -> str:
        return (f"under a `{FILE_LINE}<path>` line for each file you change, one or more "
                f"SEARCH/REPLACE blocks.\n  Each SEARCH part must match that file exactly (whitespace "
                f"included) and appear in it once:\n\n" + search_replace_example("file"))

    def rewrite_form(self) -> str:
        return (f"under a `{FILE_LINE}<path>` line for each file you change, its complete new text "
                f"in one fenced block\n  (for a file with EVOLVE markers, its EVOLVE block).")

    def format_reminder(self, form: str) -> str:
        if form == "diff":
            return f"SEARCH/REPLACE blocks under `{FILE_LINE}<path>` lines, as described above"
        return f"each changed file in one fenced block under its `{FILE_LINE}<path>` line, as described above"

    def answer_rules(self) -> str:
        return (f"The project is several files, each shown after a `{FILE_LINE}<path>` "
                f"line. Put the edits of each file you change under that line: SEARCH/REPLACE "
                f"blocks edit that file; one fenced block replaces its whole text (for a file with "
                f"EVOLVE markers, its EVOLVE block). Files you do not name stay as they are; only "
                f"these files may change: {', '.join(self.files)}.")

    def apply(self, parent: str, answer: str) -> Applied:
        files = unpack(parent)
        motivation, sections = _sections(answer)
        if not sections:
            raise EditError("no SEARCH/REPLACE block and no fenced code block in the answer")
        changed = dict(files)
        for name, text in sections:
            parsed = _parsed(name, text)
            if name is None:
                for block in parsed.blocks:
                    target = _file_matching(changed, block)
                    one = ParsedAnswer(KIND_DIFF, "", (block,))
                    changed[target] = _apply_one(target, changed[target], one)
                continue
            if name not in files:
                raise EditError(f"the answer edits '{name}', which is not an evolvable file of the task "
                                f"(files: {', '.join(files)})", FROZEN)
            changed[name] = _apply_one(name, changed[name], parsed)
        if changed == files:
            raise EditError("the answer does not change any file", EMPTY)
        return Applied(pack(changed), motivation)

    def evolvable(self, artifact: str) -> str:
        parts = {}
        for name, text in unpack(artifact).items():
            parts[name] = split_program(text).block if has_markers(text) else text
        return pack(parts)

    def sources(self, artifact: str) -> dict[str, str]:
        return unpack(artifact)

    def target(self, workdir: Path) -> Path:
        return workdir


def load_files(root: Path, names: tuple[str, ...]) -> str:
    """The listed files of a task folder packed in order; ValueError naming a file that cannot be
    used (missing, unreadable, outside the folder, or with a line that opens a packed file)."""
    files = {}
    for name in names:
        path = (root / name).resolve()
        if not path.is_relative_to(root.resolve()) or Path(name).is_absolute():
            raise ValueError(f"'{name}' is outside the task folder")
        if not path.is_file():
            raise ValueError(f"'{name}' does not exist in {root}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"'{name}' cannot be read as text: {exc}") from None
        if any(line.startswith(FILE_LINE) for line in text.splitlines()):
            raise ValueError(f"'{name}' has a line starting with '{FILE_LINE.strip()}', which "
                             f"evoforge uses to separate files")
        try:
            split_program(text)
        except EditError as exc:
            raise ValueError(f"'{name}': {exc}") from None
        files[name] = text
    return pack(files)


def _sections(answer: str) -> tuple[str, list[tuple[str | None, str]]]:
    """The answer's motivation, and its text cut at file lines: (path or None, text)."""
    name: str | None = None
    lines: list[str] = []
    sections: list[tuple[str | None, list[str]]] = []
    for line in answer.replace("\r\n", "\n").splitlines(keepends=True):
        named = file_line(line)
        if named is not None:
            sections.append((name, lines))
            name, lines = named, []
        else:
            lines.append(line)
    sections.append((name, lines))
    head = "".join(sections[0][1])
    try:
        first = parse_answer(head)
        motivation = first.motivation
    except EditError:  # no edit before the first file line: all of it is motivation
        motivation, sections[0] = head.strip(), (None, [])
    kept = [(n, "".join(text)) for n, text in sections if n is not None or "".join(text).strip()]
    return motivation, kept


def _parsed(name: str | None, text: str) -> ParsedAnswer:
    try:
        parsed = parse_answer(text)
    except EditError as exc:
        where = f"under '{FILE_LINE}{name}'" if name else "before the first file line"
        raise EditError(f"{where}: {exc}", exc.reason) from None
    if name is None and parsed.kind != KIND_DIFF:
        raise EditError(f"a fenced file must follow a '{FILE_LINE}<path>' line naming the file it replaces",
                        MALFORMED)
    return parsed


def _file_matching(files: dict[str, str], block: SearchReplace) -> str:
    """The one file a SEARCH block without a file line applies to."""
    fits = []
    for name, text in files.items():
        try:
            apply_diff(text, [block])
            fits.append(name)
        except EditError:
            continue
    if len(fits) == 1:
        return fits[0]
    first = next((ln.strip() for ln in block.search.splitlines() if ln.strip()), "")[:60]
    if not fits:
        raise EditError(f"SEARCH text {first!r} is in no file of the project (name the file with a "
                        f"'{FILE_LINE}<path>' line)", MALFORMED)
    raise EditError(f"SEARCH text {first!r} is in several files ({', '.join(fits)}); name the file with "
                    f"a '{FILE_LINE}<path>' line", MALFORMED)


def _apply_one(name: str, text: str, parsed: ParsedAnswer) -> str:
    try:
        return apply_answer(text, parsed, language="python" if name.endswith(".py") else "text")
    except EditError as exc:
        raise EditError(f"{name}: {exc}", exc.reason) from None
