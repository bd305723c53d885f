"""Markdown, HTML and plain text as units: a unit per section ("§ Install > Options") or paragraph
("lines 10-42")."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from evoforge.cognition.documents.units import Document, Unit

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_DROPPED = {"script", "style", "nav", "noscript", "template", "head"}
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCKS = {"p", "div", "li", "br", "tr", "pre", "section", "article", "blockquote", "dd", "dt", "table"}


def _path_locator(path: list[str]) -> str:
    return "§ " + " > ".join(path) if path else "§ (before the first heading)"


class _Sections:
    """Text gathered under the current heading path, closed into a unit at each new heading."""

    def __init__(self) -> None:
        self.units: list[Unit] = []
        self.path: list[str] = []
        self.lines: list[str] = []

    def heading(self, level: int, title: str) -> None:
        self.close()
        self.path = self.path[: level - 1] + [" ".join(title.split())]

    def close(self) -> None:
        text = "\n".join(self.lines).strip()
        if text:
            self.units.append(Unit(_path_locator(self.path), text))
        self.lines = []


def markdown_units(text: str) -> list[Unit]:
    """The markdown's sections (heading path as locator), headings inside code fences not counted.

    >>> [(u.locator, u.text) for u in markdown_units("# Install\\nrun it\\n## Options\\nset x\\n")]
    [('§ Install', 'run it'), ('§ Install > Options', 'set x')]
    """
    sections, fenced = _Sections(), False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line)
        if match:
            sections.heading(len(match.group(1)), match.group(2))
        else:
            sections.lines.append(line)
    sections.close()
    return sections.units


class _HtmlText(HTMLParser):
    """The visible text of an HTML page split at h1-h6, without script, style and nav."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections = _Sections()
        self.dropped = 0
        self.title: list[str] | None = None
        self.level = 0
        self.line: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROPPED:
            self.dropped += 1
        elif tag in _HEADINGS and not self.dropped:
            self._end_line()
            self.title, self.level = [], _HEADINGS[tag]
        elif tag in _BLOCKS:
            self._end_line()

    def handle_endtag(self, tag: str) -> None:
        if tag in _DROPPED:
            self.dropped = max(0, self.dropped - 1)
        elif tag in _HEADINGS and self.title is not None:
            title = " ".join("".join(self.title).split())
            if title:
                self.sections.heading(self.level, title)
            self.title = None
        elif tag in _BLOCKS:
            self._end_line()

    def handle_data(self, data: str) -> None:
        if self.dropped:
            return
        (self.title if self.title is not None else self.line).append(data)

    def _end_line(self) -> None:
        line = " ".join("".join(self.line).split())
        if line:
            self.sections.lines.append(line)
        self.line = []

    def units(self) -> list[Unit]:
        self._end_line()
        self.sections.close()
        return self.sections.units


def html_units(text: str) -> list[Unit]:
    """The HTML page's sections (h1-h6 path as locator), script/style/nav dropped.

    >>> [(u.locator, u.text) for u in html_units("<h1>Use</h1><p>a b</p><script>x()</script><h2>More</h2>c")]
    [('§ Use', 'a b'), ('§ Use > More', 'c')]
    """
    parser = _HtmlText()
    parser.feed(text)
    parser.close()
    return parser.units()


def text_units(text: str) -> list[Unit]:
    """The plain text's paragraphs (blank-line separated), each located by its lines.

    >>> [(u.locator, u.text) for u in text_units("one\\ntwo\\n\\nthree\\n")]
    [('lines 1-2', 'one\\ntwo'), ('line 4', 'three')]
    """
    units: list[Unit] = []
    start, lines = 0, []
    for number, line in enumerate([*text.splitlines(), ""], start=1):
        if line.strip():
            start = start or number
            lines.append(line)
        elif lines:
            end = number - 1
            where = f"line {start}" if start == end else f"lines {start}-{end}"
            units.append(Unit(where, "\n".join(lines).strip()))
            start, lines = 0, []
    return units


def read_markup(path: Path, text: str) -> Document:
    """The file's units by its suffix: markdown, HTML, or plain text."""
    suffix = path.suffix.lower()
    if suffix in (".md", ".markdown"):
        return Document(path, markdown_units(text))
    if suffix in (".html", ".htm"):
        return Document(path, html_units(text))
    return Document(path, text_units(text))
