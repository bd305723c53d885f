"""The task model's outputs by (artifact hash, case id), so that no case is paid twice: kept in
memory and, once the run names a file (`<run>/task_model_cache.jsonl`), appended there line by
line and read back by a resumed run, which then pays for no case an earlier session ran.

    >>> import tempfile
    >>> from pathlib import Path
    >>> path = Path(tempfile.mkdtemp()) / "cache.jsonl"
    >>> cache = CaseCache()
    >>> cache.open(path)
    0
    >>> cache.put("abc", "val-1", ("Answer: 4.", 1.0, ""))
    >>> cache.close()
    >>> again = CaseCache()
    >>> again.open(path), again.get("abc", "val-1")
    (1, ('Answer: 4.', 1.0, ''))
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)
Entry = tuple[str, float, str]  # output, score, feedback
CACHE_FILE = "task_model_cache.jsonl"  # in the run folder


class CaseCache:
    """Outputs by (artifact hash, case id); with a file, kept across sessions."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}
        self._file: IO[str] | None = None

    def open(self, path: Path) -> int:
        """Read the entries `path` holds (a last line a kill cut short is skipped) and append new
        ones there; returns how many were read."""
        read = 0
        if path.is_file():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    key, case_id, output, score, note = json.loads(line)
                    self._entries[(str(key), str(case_id))] = (str(output), float(score), str(note))
                    read += 1
                except (ValueError, TypeError):
                    log.warning("%s line %d: not a cache entry, skipped", path, number)
        self._file = path.open("a", encoding="utf-8")
        return read

    def get(self, key: str, case_id: str) -> Entry | None:
        return self._entries.get((key, case_id))

    def put(self, key: str, case_id: str, entry: Entry) -> None:
        self._entries[(key, case_id)] = entry
        if self._file is not None:
            self._file.write(json.dumps([key, case_id, *entry]) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
