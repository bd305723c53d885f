"""A PDF's text with pypdf, a unit per page and outline section, located as "page 3, §2.1 Rules"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pypdf
from pypdf.errors import PyPdfError

from evoforge.cognition.documents.units import Document, Unit
from evoforge.cognition.errors import CognitionError


def read_pdf(path: Path) -> Document:
    """The PDF's pages as units (split where an outline section starts); CognitionError when unreadable."""
    try:
        reader = pypdf.PdfReader(path)
        if reader.is_encrypted:
            raise CognitionError(f"{path}: an encrypted PDF; decrypt it first (e.g. qpdf --decrypt)")
        sections = _outline(reader)
        texts = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, OSError, ValueError, KeyError, TypeError) as exc:
        raise CognitionError(f"{path}: not a readable PDF ({type(exc).__name__}: {exc})") from None
    units: list[Unit] = []
    current = ""
    for number, text in enumerate(texts, start=1):
        for locator, piece in _split_page(text, number, sections.get(number - 1, []), current):
            if piece.strip():
                units.append(Unit(locator, piece.strip()))
        current = sections[number - 1][-1] if sections.get(number - 1) else current
    if not units:
        raise CognitionError(f"{path}: the PDF has no extractable text (a scan? run OCR on it first)")
    return Document(path, units, len(texts))


def _locator(page: int, section: str) -> str:
    return f"page {page}, §{section}" if section else f"page {page}"


def _split_page(text: str, page: int, starts: list[str], current: str) -> list[tuple[str, str]]:
    """The page's text cut where the titles of the sections starting on it appear, each piece located."""
    pieces: list[tuple[str, str]] = []
    position, section = 0, current
    for title in starts:
        found = text.find(_first_words(title), position)
        if found < 0:
            continue
        pieces.append((_locator(page, section), text[position:found]))
        position, section = found, title
    pieces.append((_locator(page, section), text[position:]))
    return pieces


def _first_words(title: str) -> str:
    return " ".join(title.split()[:4])


def _outline(reader: pypdf.PdfReader) -> dict[int, list[str]]:
    """The outline's section titles by the page (0-based) they start on, in reading order."""
    starts: dict[int, list[str]] = {}

    def walk(entries: list[Any]) -> None:
        for entry in entries:
            if isinstance(entry, list):
                walk(entry)
                continue
            page = reader.get_destination_page_number(entry)
            title = " ".join(str(entry.title).split())
            if page is not None and page >= 0 and title:
                starts.setdefault(page, []).append(title)

    walk(reader.outline)
    return starts
