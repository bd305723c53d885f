"""Documents read for extraction (PDF, markdown, HTML, plain text), as units of located text."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from evoforge.cognition.documents.markup import read_markup
from evoforge.cognition.documents.pdf import read_pdf
from evoforge.cognition.documents.units import Document, Reading, Unit
from evoforge.cognition.errors import CognitionError

SUFFIXES = (".pdf", ".md", ".markdown", ".html", ".htm", ".txt")

__all__ = ["SUFFIXES", "Document", "Reading", "Unit", "read_document", "read_documents"]


def read_document(path: Path) -> Document:
    """One file's units; CognitionError naming it when it cannot be read or holds no text."""
    if path.suffix.lower() == ".pdf":
        return read_pdf(path)
    try:
        text = path.read_text(encoding="utf-8", errors="strict")
    except (OSError, UnicodeDecodeError) as exc:
        raise CognitionError(f"{path}: cannot read it as UTF-8 text ({type(exc).__name__})") from None
    document = read_markup(path, text)
    if not document.units:
        raise CognitionError(f"{path}: no text in it")
    return document


def read_documents(paths: Iterable[Path]) -> Reading:
    """The documents at these paths (folders read recursively, sorted; other file types skipped)."""
    reading = Reading()
    for path in paths:
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            files = [path]
        else:
            raise CognitionError(f"{path}: no such file or folder")
        for file in files:
            if file.suffix.lower() in SUFFIXES:
                reading.documents.append(read_document(file))
            else:
                reading.skipped.append(file)
    if not reading.documents:
        raise CognitionError(f"no document to read in {', '.join(map(str, paths))} "
                             f"(known types: {' '.join(SUFFIXES)})")
    return reading
