"""Where a run keeps its files, and atomic writes so readers never see half a file."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunPaths:
    """The layout of one run folder."""

    root: Path

    @property
    def db(self) -> Path:
        return self.root / "nodes.duckdb"

    @property
    def status(self) -> Path:
        return self.root / "status.json"

    @property
    def leaderboard(self) -> Path:
        return self.root / "leaderboard.md"

    @property
    def leaderboard_json(self) -> Path:
        return self.root / "leaderboard.json"

    @property
    def best_program(self) -> Path:
        return self.best_dir / "program.py"

    @property
    def best_dir(self) -> Path:
        """The best candidate's files: `program.py`, or a files task's `files/<path>`."""
        return self.root / "best"

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def figures(self) -> Path:
        """The report's PNG plots (report.md links them as `report/<name>.png`)."""
        return self.root / "report"

    @property
    def timeline(self) -> Path:
        return self.root / "timeline.jsonl"

    @property
    def log(self) -> Path:
        return self.root / "run.log"

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def research_plan(self) -> Path:
        return self.root / "research_plan.md"

    @property
    def optuna_db(self) -> Path:
        return self.root / "optuna.db"

    def param_trials(self, node_id: str) -> Path:
        return self.root / "param_trials" / f"{node_id}.json"

    @property
    def scratch(self) -> Path:
        return self.root / ".scratch"

    def node_dir(self, node_id: str) -> Path:
        return self.root / "nodes" / node_id


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file and a rename (a failed write, a full disk say,
    leaves the old file and no temp file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
