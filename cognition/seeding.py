"""Seed items from markdown (one item per heading), JSONL (one object per line) or a folder of both.

A markdown item is a heading (the title) and the text under it; a line ``Tags: a, b`` in the
text gives its tags. A heading with no text of its own is a section title when a deeper heading
follows it, and an error otherwise. Errors name the file and line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from evoforge.cognition.entries import CognitionItem
from evoforge.cognition.errors import CognitionError

SEED_SUFFIXES = (".md", ".jsonl")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_TAGS = re.compile(r"^tags:\s*(.*)$", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(```|~~~)")
_JSON_KEYS = {"title", "text", "source", "tags", "task", "provenance"}


def _tags(text: str) -> list[str]:
    return [tag.strip() for tag in text.split(",") if tag.strip()]


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise CognitionError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise CognitionError(f"{path}: cannot be read ({exc.strerror})") from None


def _make(title: str, text: str, path: Path, tags: list[str], task: str | None,
          source: str | None = None, provenance: str | None = None) -> CognitionItem:
    return CognitionItem.create(title, text, source=source or path.name, tags=tags, task=task,
                                provenance=provenance or f"human seed: {path.name}")


def read_markdown(path: Path, task: str | None = None) -> list[CognitionItem]:
    """The items of a markdown file, one per heading."""
    sections: list[tuple[int, int, str, list[str]]] = []  # (line, level, title, body lines)
    in_fence = False
    for number, line in enumerate(_lines(path), start=1):
        heading = None if in_fence else _HEADING.match(line)
        if _FENCE.match(line):
            in_fence = not in_fence
        if heading:
            if not heading.group(2):
                raise CognitionError(f"{path}:{number}: a heading without a title")
            sections.append((number, len(heading.group(1)), heading.group(2), []))
        elif sections:
            sections[-1][3].append(line)
        elif line.strip():
            raise CognitionError(f"{path}:{number}: text before the first heading (each item starts "
                                 "with a heading)")
    items = []
    for index, (number, level, title, lines) in enumerate(sections):
        tags: list[str] = []
        body = []
        for line in lines:
            found = _TAGS.match(line.strip())
            if found:
                tags += _tags(found.group(1))
            else:
                body.append(line)
        text = "\n".join(body).strip()
        if not text:
            deeper_next = index + 1 < len(sections) and sections[index + 1][1] > level
            if deeper_next and not tags:
                continue  # a section title above its items
            raise CognitionError(f"{path}:{number}: heading '{title}' has no text under it")
        items.append(_make(title, text, path, tags, task))
    if not items:
        raise CognitionError(f"{path}: no items (each item is a heading with text under it)")
    return items


def _json_item(path: Path, number: int, line: str, task: str | None) -> CognitionItem:
    where = f"{path}:{number}"
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise CognitionError(f"{where}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise CognitionError(f"{where}: each line must be a JSON object")
    unknown = sorted(set(data) - _JSON_KEYS)
    if unknown:
        raise CognitionError(f"{where}: unknown key '{unknown[0]}' (keys: {', '.join(sorted(_JSON_KEYS))})")
    for key in ("title", "text"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise CognitionError(f"{where}: '{key}' must be a non-empty string")
    for key in ("source", "task", "provenance"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise CognitionError(f"{where}: '{key}' must be a string")
    tags = data.get("tags", [])
    if isinstance(tags, str):
        tags = _tags(tags)
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise CognitionError(f"{where}: 'tags' must be a list of strings")
    return _make(data["title"].strip(), data["text"].strip(), path, tags, data.get("task") or task,
                 data.get("source"), data.get("provenance"))


def read_jsonl(path: Path, task: str | None = None) -> list[CognitionItem]:
    """The items of a JSONL file: one object with title and text (source, tags, task optional) a line."""
    items = [_json_item(path, number, line, task)
             for number, line in enumerate(_lines(path), start=1)
             if line.strip()]
    if not items:
        raise CognitionError(f"{path}: no items")
    return items


def read_seeds(path: str | Path, task: str | None = None) -> list[CognitionItem]:
    """The items of a seed file, or of every .md and .jsonl file in a folder (sorted by name)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in SEED_SUFFIXES)
        if not files:
            raise CognitionError(f"{path}: no seed files (.md or .jsonl)")
        return [item for file in files for item in read_seeds(file, task)]
    if not path.is_file():
        raise CognitionError(f"seed file not found: {path}")
    if path.suffix == ".md":
        return read_markdown(path, task)
    if path.suffix == ".jsonl":
        return read_jsonl(path, task)
    raise CognitionError(f"{path}: seed files are .md or .jsonl, not '{path.suffix or '(no suffix)'}'")


def task_seeds(task_root: Path, task_name: str) -> list[CognitionItem]:
    """The seed items of a task folder's ``cognition/`` folder (none when it has no such folder)."""
    folder = Path(task_root) / "cognition"
    return read_seeds(folder, task=task_name) if folder.is_dir() else []
