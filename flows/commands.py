"""The commands on a run folder that read it: status, leaderboard, best, report."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from evoforge.infra.runfiles import RunPaths, read_json, write_atomic


class NoRunError(ValueError):
    """The folder holds no evoforge run."""


def _alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def load_status(run_dir: Path) -> dict[str, Any]:
    """The run's latest status snapshot; a 'running' run whose process is gone says so."""
    paths = RunPaths(run_dir)
    status = read_json(paths.status)
    if status is None:
        raise NoRunError(f"no evoforge run in {run_dir} (no status.json)")
    if status.get("state") == "running" and not _alive(status.get("pid")):
        status["state"] = "stopped (process gone; run again to resume)"
    return status


def stage_note(status: dict[str, Any]) -> str:
    """", <stage> stage" for a staged run's best score, nothing for a plain task."""
    if status.get("search_stage", "full") == "full" or not status.get("best_stage"):
        return ""
    return f", {status['best_stage']} stage"


def status_text(status: dict[str, Any]) -> str:
    best = status.get("best_score")
    lines = [
        f"task          {status.get('task')}  (run {status.get('run_id')}, {status.get('state')})",
        f"backend       {status.get('backend')} {status.get('model') or ''}".rstrip(),
        f"evaluations   {status['evaluations']} / {status.get('max_evals')}"
        f"  ({status['nodes_evaluated']} accepted, {_failed_evaluations(status)} failed"
        f"{_pruned(status)}; {_rejected(status)} rejected before evaluation)",
        f"best          {best if best is not None else '-'}  (node {status.get('best_node')}"
        f"{stage_note(status)})",
        f"rate          {status['candidates_per_min']} candidates/min over {status['wall_s']:.1f} s",
        f"tokens        {status['tokens_in']} in, {status['tokens_out']} out",
    ]
    if status.get("stop_reason"):
        lines.append(f"stop reason   {status['stop_reason']}")
    return "\n".join(lines)


def _rejected(status: dict[str, Any]) -> int:
    """Proposals that never reached an evaluation: unusable answers, duplicates, stale drops."""
    return status["failed_research"] + status["duplicates_rejected"] + status.get("dropped_stale", 0)


def _pruned(status: dict[str, Any]) -> str:
    parts = [f"{status[k]} {label}" for k, label in (("pruned", "pruned"), ("rolled_back", "rolled back"))
             if status.get(k)]
    return (", " + ", ".join(parts)) if parts else ""


def _failed_evaluations(status: dict[str, Any]) -> int:
    return (status["evaluations"] - status["nodes_evaluated"] - status.get("pruned", 0)
            - status.get("rolled_back", 0))


def cmd_status(run_dir: Path, as_json: bool) -> int:
    status = load_status(run_dir)
    print(json.dumps(status, indent=2) if as_json else status_text(status))
    return 0


def cmd_leaderboard(run_dir: Path) -> int:
    path = RunPaths(run_dir).leaderboard
    if not path.is_file():
        raise NoRunError(f"no evoforge run in {run_dir} (no leaderboard.md)")
    print(path.read_text(), end="")
    return 0


def cmd_best(run_dir: Path, output: Path | None) -> int:
    status = load_status(run_dir)
    program = RunPaths(run_dir).best_program
    if not program.is_file():
        raise NoRunError(f"the run in {run_dir} has no evaluated program yet")
    code = program.read_text()
    if output is None:
        sys.stdout.write(code)
    else:
        output.write_text(code)
        print(f"wrote {output}")
    print(f"best score {status.get('best_score')} (node {status.get('best_node')}{stage_note(status)})",
          file=sys.stderr)
    return 0


def cmd_report(run_dir: Path) -> int:
    """Write the run's report.md from its node database (the run must not be going) and print it."""
    from evoforge.infra.nodestore import NodeStore
    from evoforge.stages.report import report_md

    paths = RunPaths(run_dir)
    if not paths.db.is_file():
        raise NoRunError(f"no evoforge run in {run_dir} (no nodes.duckdb)")
    with NodeStore(paths.db, read_only=True) as store:
        nodes, task_name = store.all(), store.get_meta("task") or run_dir.name
        maximize = store.get_meta("direction", "maximize") == "maximize"
    text = report_md(task_name, nodes, maximize)
    write_atomic(paths.report, text)
    print(text, end="")
    print(f"wrote {paths.report}", file=sys.stderr)
    return 0
