"""Several files held as one text: how a `files` artifact is stored, hashed, shown and edited.

Each file opens with a `### FILE: <path>` line followed by its text (ending with a newline).
The same line names the file an edit is for in an answer, so the stored form, the prompt and the
answer speak one format:

    >>> text = pack({"a.py": "x = 1\\n", "b.py": "y = 2"})
    >>> text.splitlines()
    ['### FILE: a.py', 'x = 1', '### FILE: b.py', 'y = 2']
    >>> unpack(text)
    {'a.py': 'x = 1\\n', 'b.py': 'y = 2\\n'}
    >>> file_line("### file: `b.py`")
    'b.py'
"""

from __future__ import annotations

import re

FILE_LINE = "### FILE: "
# the line that names a file: tolerant of what answers write around the name
_FILE_RE = re.compile(r"^[ \t]*(?:#{1,6}[ \t]*)?(?:\*\*)?FILE:[ \t]*[`'\"]?([^`'\"\s*]+)[`'\"]?"
                      r"(?:\*\*)?[ \t]*$", re.IGNORECASE)


def pack(files: dict[str, str]) -> str:
    """The files, in the order given, as one text."""
    return "".join(f"{FILE_LINE}{name}\n{_ended(text)}" for name, text in files.items())


def unpack(text: str) -> dict[str, str]:
    """The files of a packed text, in order; ValueError for text that is not one."""
    files: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(FILE_LINE):
            if name is not None:
                files[name] = "".join(lines)
            name, lines = line[len(FILE_LINE):].strip(), []
            if not name or name in files:
                raise ValueError(f"a packed file line names {'no file' if not name else 'a file twice'}: "
                                 f"{line.strip()!r}")
        elif name is None:
            if line.strip():
                raise ValueError("packed files must open with a '### FILE: <path>' line")
        else:
            lines.append(line)
    if name is not None:
        files[name] = "".join(lines)
    if not files:
        raise ValueError("no '### FILE: <path>' line: not packed files")
    return files


def is_packed(text: str) -> bool:
    """True when `text` opens with a file line."""
    return text.startswith(FILE_LINE)


def file_line(line: str) -> str | None:
    """The path a line of an answer names (`### FILE: x`, `FILE: x`, `**File:** x`), else None."""
    match = _FILE_RE.match(line.rstrip("\r\n"))
    return match.group(1) if match else None


def _ended(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"
