"""The commands on a run folder that read it: status, leaderboard, best, report."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from evoforge.infra.artifacts.bundle import pack
from evoforge.infra.runfiles import RunPaths, read_json


class NoRunError(ValueError):
    """The folder holds no evoforge run."""


class OutputError(ValueError):
    """A file a command was asked to write cannot be written (user error, one line)."""


def _alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def resolve_run_dir(target: str | Path, workspace: str | Path) -> Path:
    """The run folder `target` names: a folder holding a run, else the run of that task name in
    the workspace (`evoforge status circle_packing`)."""
    given = Path(target)
    if (given / "status.json").is_file() or (given / "nodes.duckdb").is_file():
        return given
    in_workspace = Path(workspace) / str(target)
    if given.name == str(target) and in_workspace.is_dir():
        return in_workspace
    if given.is_dir():
        return given  # a folder without a run: the command says so
    raise NoRunError(f"no evoforge run '{target}': not a run folder, and no run of that task in "
                     f"{Path(workspace)}/ (pass the run folder, or --workspace)")


def refuse_busy(run_dir: Path, flag: str) -> None:
    """Refuse a run folder that is not a folder, or that another evoforge run is using (it holds
    the node database's lock: the one authority, as a pid in status.json may have been reused)."""
    from evoforge.flows.session import RunDirError
    from evoforge.infra.nodestore import NodeStore, StoreBusyError

    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"{flag} {run_dir}: not a folder")
    paths = RunPaths(run_dir)
    if not paths.db.is_file():
        return
    try:
        NodeStore(paths.db, read_only=True).close()
    except StoreBusyError:
        pid = (read_json(paths.status) or {}).get("pid")
        by = f" (pid {pid})" if _alive(pid) else ""
        raise StoreBusyError(f"run folder {run_dir} is in use by another evoforge run{by}: wait for it "
                             f"to end or stop it, or pass another --run-dir") from None


def load_status(run_dir: Path) -> dict[str, Any]:
    """The run's latest status snapshot; a 'running' run whose process is gone says so."""
    paths = RunPaths(run_dir)
    status = read_json(paths.status)
    if status is None:
        raise NoRunError(f"no evoforge run in {run_dir} (no status.json)")
    if status.get("state") == "running" and not _alive(status.get("pid")):
        status["state"] = "stopped (process gone; run again to resume)"
    return status


def level_note(status: dict[str, Any]) -> str:
    """", <level> level" for a gated run's best score, nothing for a plain task."""
    if status.get("search_level", "full") == "full" or not status.get("best_level"):
        return ""
    return f", {status['best_level']} level"


# The counts the text shows, each under its status.json key, so the two views cannot disagree.
EVALUATION_COUNTS = (("accepted", "nodes_evaluated"), ("failed", "failed_evaluation"),
                     ("pruned", "pruned"), ("rolled back", "rolled_back"))
# failed, rejected or stale: the nodes without an accepted evaluation, each under its one reason
# (status.json's `failures_by_reason`, infra/failure_reasons.py)
FAILURE_COUNTS = (("failed", "nodes_failed"), ("stale", "dropped_stale"))


def _counts(status: dict[str, Any], counts: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{status.get(key, 0)} {label}" for label, key in counts)


def failures_line(status: dict[str, Any]) -> str:
    """The failures (failed, rejected, stale nodes) and their buckets, each a reason's count; a
    status.json of an evoforge before the reasons shows the total alone."""
    total = sum(status.get(key, 0) for _, key in FAILURE_COUNTS)
    buckets = status.get("failures_by_reason")
    if buckets is None:
        return f"failures      {total}"
    shown = ", ".join(f"{count} {reason}" for reason, count in buckets.items())
    return f"failures      {total}  ({shown or 'none'})"


def status_text(status: dict[str, Any]) -> str:
    """The status as text: every count is a status.json value, named after its key."""
    best = status.get("best_score")
    # never evaluated: the failures minus those whose evaluation ran and failed
    rejected = sum(status.get(key, 0) for _, key in FAILURE_COUNTS) - status.get("failed_evaluation", 0)
    lines = [
        f"task          {status.get('task')}  (run {status.get('run_id')}, {status.get('state')})",
        f"backend       {status.get('backend')} {status.get('model') or ''}".rstrip(),
        f"evaluations   {status['evaluations']} / {status.get('max_evals')}"
        f"  ({_counts(status, EVALUATION_COUNTS)})",
        f"not evaluated {rejected}  (failed before an evaluation, rejected, or dropped as stale)",
        failures_line(status),
        f"repeats       {status.get('repeats', 0)}  (of the duplicates: served from earlier evaluations, "
        "not evaluated)",
        f"best          {best if best is not None else '-'}  (node {status.get('best_node')}"
        f"{level_note(status)})",
        f"rate          {status['candidates_per_min']} candidates/min over {status['wall_s']:.1f} s",
        f"tokens        {status['tokens_in']} in, {status['tokens_out']} out",
    ]
    if "llm_circuit" in status:  # a run over an LLM server: its circuit breaker
        last = status.get("llm_last_error")
        lines.append(f"llm circuit   {status['llm_circuit']}, {status.get('llm_pauses', 0)} pauses "
                     f"({status.get('llm_paused_s', 0):.1f} s paused)"
                     + (f", last error: {last}" if last else ""))
    models = status.get("models") or {}
    if len(models) > 1:
        lines.extend(f"model         {_model_line(name, row)}" for name, row in models.items())
    sandbox = status.get("sandbox")
    if sandbox:
        lines.append(f"sandbox       user: {sandbox['user']}; network: {sandbox['network']}; "
                     f"filesystem: {sandbox['filesystem']}; processes: {sandbox['process_limit']}")
        if "warm" in sandbox:
            servers = sandbox.get("fork_servers") or {}
            counts = ""
            if servers:
                counts = (f" ({servers.get('started', 0)} fork servers started, "
                          f"{servers.get('restarted_task_changed', 0)} restarts for changed task files, "
                          f"{servers.get('restarted_crashed', 0)} after a crash, "
                          f"{servers.get('retried_candidates', 0)} candidates evaluated again)")
            lines.append(f"warm sandbox  {sandbox['warm']}{counts}")
    if "sinks" in status:
        lag = status.get("records_lag_s", 0.0)
        lines.append(f"records       {len(status['sinks'])} sinks, lag {lag:.1f} s")
    for name, failure in (status.get("tracking_failures") or {}).items():
        lines.append(f"not recorded  {name}: {failure['failures']} batches failed, "
                     f"{failure.get('never_recorded', 0)} events never recorded "
                     f"(last: {failure['last_error']}; run.log has the traceback)")
    used = status.get("task_model")
    if used:
        lines.append(f"task model    {used['calls']} calls ({used['cached']} cached, {used['failed']} "
                     f"failed, {used.get('truncated', 0)} cut off at max_tokens), {used['tokens_in']} tokens "
                     f"in / {used['tokens_out']} out, "
                     f"{used['seconds']:.1f} s, ${used['cost_usd']:.4f}")
    lines.extend(_spending_lines(status.get("spending") or {}))
    if status.get("stop_reason"):
        lines.append(f"stop reason   {status['stop_reason']}")
    return "\n".join(lines)


def _model_line(name: str, row: dict[str, Any]) -> str:
    """One model's figures: candidates designed, improvements, tokens, LLM seconds per candidate, cost."""
    cost = "no price" if row.get("cost_usd") is None else f"${row['cost_usd']:.4f}"
    return (f"{name}: {row.get('calls', 0)} calls, {row.get('improvements', 0)} improved, "
            f"{row.get('tokens_in', 0)} in / {row.get('tokens_out', 0)} out tokens, "
            f"{row.get('llm_s_per_candidate', 0.0)} LLM s/candidate, {cost}")


def _spending_lines(spending: dict[str, Any]) -> list[str]:
    """The money and tokens of the run's LLM calls, over its sessions and in this one."""
    session = spending.get("session") or {}
    lines = []
    if spending.get("cap_usd") is not None:
        lines.append(f"spent         ${spending['spent_usd']:.4f} of ${spending['cap_usd']:.4f} "
                     f"(${spending['left_usd']:.4f} left) over the run's sessions"
                     + (f"; this session ${session['spent_usd']:.4f}" if "spent_usd" in session else ""))
    if spending.get("calls"):
        lines.append(f"llm usage     {spending['calls']} calls, {spending.get('tokens_in', 0)} tokens in / "
                     f"{spending.get('tokens_out', 0)} out over the run's sessions"
                     + (f"; this session {session.get('calls', 0)} calls, {session.get('tokens_in', 0)} in / "
                        f"{session.get('tokens_out', 0)} out" if session else ""))
    return lines


def cmd_status(run_dir: Path, as_json: bool) -> int:
    status = load_status(run_dir)
    print(json.dumps(status, indent=2) if as_json else status_text(status))
    return 0


def cmd_leaderboard(run_dir: Path, top: int | None = None, as_json: bool = False) -> int:
    """Print the leaderboard: leaderboard.md as written, or its top rows (as JSON with `as_json`)."""
    paths = RunPaths(run_dir)
    if not paths.leaderboard.is_file():
        raise NoRunError(f"no evoforge run in {run_dir} (no leaderboard.md)")
    if top is None and not as_json:
        print(paths.leaderboard.read_text(), end="")
        return 0
    rows = read_json(paths.leaderboard_json)
    if rows is None:
        raise NoRunError(f"the run in {run_dir} has no leaderboard.json (written by evoforge 0.2 on)")
    rows = rows[:top] if top is not None else rows
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        level = f" ({row['level']})" if row["level"] != "full" else ""
        print(f"{row['rank']:>3}  {row['node']}  {row['score']}{level}  gen {row['generation']}  "
              f"{row['motivation'][:70]}")
    return 0


def cmd_tasks() -> int:
    """List the built-in tasks with their objective and description."""
    from evoforge.evaluators.task import builtin_task_names, load_task

    for name in builtin_task_names():
        task = load_task(name)
        levels = "/".join(s.name for s in task.levels)
        about = " ".join(task.description.split())[:80]
        print(f"{name:<16} {task.kind:<8} {task.direction} {task.objective:<14} levels {levels:<16} "
              f"{about}")
    return 0


def cmd_best(run_dir: Path, output: Path | None) -> int:
    """The run's best program (a text task's prompt) on stdout, or written to the file `output`;
    a files task's several files: each after its `### FILE:` line, or into the folder `output`."""
    status = load_status(run_dir)
    best = RunPaths(run_dir).best_dir
    files = {"": best / "program.py"} if (best / "program.py").is_file() else {
        str(p.relative_to(best / "files")): p for p in sorted((best / "files").rglob("*")) if p.is_file()}
    if not files:
        raise NoRunError(f"the run in {run_dir} has no evaluated program yet")
    texts = {name: path.read_text() for name, path in files.items()}
    single = next(iter(texts.values())) if len(texts) == 1 else None
    if output is None:
        sys.stdout.write(single if single is not None else pack(texts))
    else:
        try:
            if single is not None:
                output.write_text(single)
            else:  # a folder of its own (its parent must exist, as a program file's must)
                output.mkdir(exist_ok=True)
                for name, text in texts.items():
                    (output / name).parent.mkdir(parents=True, exist_ok=True)
                    (output / name).write_text(text)
        except OSError as exc:
            raise OutputError(f"-o {output}: cannot write it ({exc.strerror or exc})") from None
        print(f"wrote {output}" + (f" ({', '.join(texts)})" if single is None else ""))
    print(f"best score {status.get('best_score')} (node {status.get('best_node')}{level_note(status)})",
          file=sys.stderr)
    return 0


def cmd_report(run_dir: Path) -> int:
    """Write the run's report.md and its plots (report/*.png) from its node database and
    timeline, and print it; refused while the run is going (its process holds the database)."""
    from evoforge.evaluators.task import TaskError, load_task
    from evoforge.infra.nodestore import NodeStore, StoreBusyError
    from evoforge.stages.reports.run_report import RunFacts, held_out, rounds_of, write_report

    paths = RunPaths(run_dir)
    if not paths.db.is_file():
        raise NoRunError(f"no evoforge run in {run_dir} (no nodes.duckdb)")
    status = read_json(paths.status) or {}
    level = status.get("search_level") or "full"
    try:
        with NodeStore(paths.db, read_only=True) as store:
            task_name = store.get_meta("task") or run_dir.name
            maximize = store.get_meta("direction", "maximize") == "maximize"
            try:  # a gated task's sections need its levels; a task folder since moved has none
                task = load_task(task_name)
                gated, kind = task.gated, task.kind
            except TaskError:
                gated, kind = level != "full", "program"
            plans, promotions = rounds_of(store)
            facts = RunFacts(task_name, maximize, level, gated, kind, status.get("task_model"))
            text, drawn = write_report(paths, store.all(), held_out(store), facts,
                                       status.get("best_node"), plans, promotions)
    except StoreBusyError:
        raise StoreBusyError(f"the run in {run_dir} is going and holds its node database: its report "
                             f"is written when it ends (`evoforge status {run_dir}` works now)") from None
    print(text, end="")
    print(f"wrote {paths.report} ({len(drawn)} plots in {paths.figures})", file=sys.stderr)
    return 0
