"""Crash consistency: SIGKILL one evolution run at random moments, resume it each time, then audit.

One `evoforge run` (circle_packing, offline proposer, several evaluation workers) is killed with
SIGKILL `--kills` times at seeded random moments (some during start-up, the rest after a random
number of new evaluations), and started again on the same folder after each kill, until it ends
on its own. Then it checks and prints:

- evaluations: the run folder holds exactly the budget;
- lost: a candidate with an outcome in the database after some kill is still there, unchanged;
- duplicated: none was evaluated again after its outcome was stored, none has two MLflow runs;
- stuck: no candidate is left proposed or speculative (in flight);
- MLflow: no run of the run's tree left RUNNING, one candidate run per candidate with an outcome;
- Prefect: no flow run or task run left RUNNING or PENDING (a killed session's are CRASHED);
- sampler: the state the last session closed with equals a rebuild from the node database;
- orphans: after every kill and at the end, no process of the run is left (its Prefect server,
  its watchdog, its evaluation children and what they started).

    python bench/crash_kills.py --evals 300 --kills 24 --seed 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.reaper import Proc, alive, processes, started_with

ORPHAN_WAIT_S = 30.0  # how long the run's processes may take to go once it is dead


@dataclass(frozen=True)
class Outcome:
    """A candidate's stored outcome, as one kill left it."""

    status: str
    evaluated_at: float | None


@dataclass
class Series:
    """One run driven through its kills: what was seen after each, and what was left behind."""

    run_dir: Path
    workspace: Path
    prefect_home: Path
    budget: int
    kills: int = 0
    sessions: int = 0
    seen: list[dict[str, Outcome]] = field(default_factory=list)  # after each kill
    orphans: list[str] = field(default_factory=list)  # processes still there after the wait
    kill_moments: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def run_args(series: Series, workers: str, seed: int, sampler: str) -> list[str]:
    """The `evoforge run` command line every session uses. status.json is rewritten every 0.25 s
    (not 2 s), so a kill aimed at an evaluation count lands near it, not after the run ended."""
    config = series.run_dir.parent / "crash-config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"engine": {"progress_interval_s": 0.25}}))
    return ["run", "circle_packing", "--run-dir", str(series.run_dir), "--workspace",
            str(series.workspace), "--max-evals", str(series.budget), "--workers", workers,
            "--seed", str(seed), "--sampler", sampler, "--config", str(config), "--quiet"]


def read_outcomes(run_dir: Path) -> dict[str, Outcome]:
    """Every candidate with a stored outcome (terminal status)."""
    return {n.id: Outcome(str(n.status), n.evaluated_at) for n in read_nodes(run_dir) if n.status.terminal}


def read_nodes(run_dir: Path) -> list[Node]:
    if not (run_dir / "nodes.duckdb").is_file():
        return []
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        return store.all()


def evaluations(run_dir: Path) -> int:
    """The evaluation count in status.json (0 before the first)."""
    try:
        return int(json.loads((run_dir / "status.json").read_text())["evaluations"])
    except (OSError, ValueError, KeyError):
        return 0


def run_processes(prefect_home: Path, children: dict[int, Proc]) -> list[Proc]:
    """Live processes of the run: those started with its PREFECT_HOME (the run, its Prefect
    server, its watchdog), the noted children of a run process, and the members of sessions those
    children led (evaluation children and what they forked)."""
    entry = f"PREFECT_HOME={prefect_home}"
    found = []
    for proc in processes():
        if proc.pid == os.getpid():
            continue
        leader = children.get(proc.sid)
        if (started_with(proc.pid, entry) or (proc.pid in children and alive(children[proc.pid]))
                or (leader is not None and proc.start >= leader.start)):
            found.append(proc)
    return found


def note_children(pid: int, children: dict[int, Proc]) -> None:
    """Remember the live children of `pid` (with their start times)."""
    for proc in processes():
        if proc.ppid == pid:
            children.setdefault(proc.pid, proc)


def leftovers(prefect_home: Path, children: dict[int, Proc], wait_s: float = ORPHAN_WAIT_S) -> list[str]:
    """The run's processes still there `wait_s` after it died (none: returns as soon as they are
    gone), as `pid: command line`."""
    deadline = time.monotonic() + wait_s
    left = run_processes(prefect_home, children)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = run_processes(prefect_home, children)
    described = []
    for proc in left:
        try:
            cmd = Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ")[:100]
        except OSError:  # it went just now
            continue
        described.append(f"{proc.pid}: {cmd.decode(errors='replace')}")
    return described


def _session(series: Series, args: list[str], env: dict[str, str],
             kill: tuple[str, float, float] | None, log: Path) -> int | None:
    """Run one session; kill it at `kill`: ("time", seconds after its start, 0) or ("evals", count,
    seconds after the count is reached); returns its exit code, or None when it was killed."""
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "evoforge.flows.cli", *args], env=env,
                                stdout=out, stderr=out, cwd=series.run_dir.parent)
    children: dict[int, Proc] = {}
    start = time.monotonic()
    at = start + kill[1] if kill is not None and kill[0] == "time" else None
    series.sessions += 1
    while proc.poll() is None:
        note_children(proc.pid, children)
        if at is None and kill is not None and evaluations(series.run_dir) >= kill[1]:
            at = time.monotonic() + kill[2]  # a moment after the count is reached, not at it
        if at is not None and time.monotonic() >= at:
            note_children(proc.pid, children)
            proc.kill()
            proc.wait()
            series.kills += 1
            series.kill_moments.append(f"{time.monotonic() - start:.1f}s/{evaluations(series.run_dir)}ev")
            series.seen.append(read_outcomes(series.run_dir))
            series.orphans += leftovers(series.prefect_home, children)
            return None
        time.sleep(0.05)
    series.orphans += leftovers(series.prefect_home, children)
    return proc.returncode


def drive(series: Series, args: list[str], kills: int, seed: int, env: dict[str, str]) -> int:
    """Run the series: `kills` seeded random kills, then sessions until the run ends; returns the
    last exit code."""
    rng = random.Random(seed)
    log = series.run_dir.parent / "sessions.log"
    series.run_dir.parent.mkdir(parents=True, exist_ok=True)
    per_kill = max(2, series.budget // (kills + 1))  # new evaluations before a kill: 1..per_kill
    t0 = time.monotonic()
    code: int | None = None
    while True:
        done = evaluations(series.run_dir)
        if series.kills < kills and done < series.budget - 2:
            kill = (("time", rng.uniform(0.5, 15.0), 0.0) if rng.random() < 0.2
                    # at least 3 evaluations before the end: a fast run (status.json every 0.25 s)
                    # must not reach its budget before the kill lands
                    else ("evals", min(series.budget - 3, done + rng.randint(1, per_kill)),
                          rng.uniform(0.0, 1.0)))
        else:
            kill = None
        code = _session(series, args, env, kill, log)
        if code is not None:
            break
    series.wall_s = time.monotonic() - t0
    return code


@dataclass(frozen=True)
class Audit:
    """The figures the series ends with."""

    evaluations: int
    lost: list[str]
    duplicated: list[str]
    stuck: list[str]
    mlflow_running: list[str]
    mlflow_missing: list[str]
    mlflow_extra: list[str]
    sampler_equal: bool
    reconciled: list[str]  # run.log lines of each resume's MLflow reconciliation
    prefect_unfinished: tuple[int, int]  # flow runs, task runs still RUNNING or PENDING

    def ok(self, budget: int, orphans: list[str]) -> bool:
        return (self.evaluations == budget and not (self.lost or self.duplicated or self.stuck
                or self.mlflow_running or self.mlflow_missing or self.mlflow_extra or orphans
                or any(self.prefect_unfinished)) and self.sampler_equal)


def audit(series: Series, sampler: str) -> Audit:
    """Check the run folder, MLflow and the sampler against what each kill left."""
    nodes = read_nodes(series.run_dir)
    by_id = {n.id: n for n in nodes}
    lost, duplicated = set(), set()
    for seen in series.seen:
        for node_id, outcome in seen.items():
            now = by_id.get(node_id)
            if now is None or str(now.status) != outcome.status:
                lost.add(node_id)
            elif now.evaluated_at != outcome.evaluated_at:
                duplicated.add(node_id)
    stuck = [n.id for n in nodes if not n.status.terminal]
    running, missing, extra = mlflow_audit(series, nodes)
    duplicated |= set(extra)
    log = series.run_dir / "run.log"
    reconciled = [line.split(": ", 1)[-1] for line in log.read_text().splitlines()
                  if "MLflow reconciled" in line] if log.is_file() else []
    return Audit(sum(n.was_evaluated for n in nodes), sorted(lost), sorted(duplicated), stuck,
                 running, missing, extra, sampler_matches(series.run_dir, nodes, sampler), reconciled,
                 prefect_unfinished(series.prefect_home))


def prefect_unfinished(prefect_home: Path) -> tuple[int, int]:
    """(flow runs, task runs) left RUNNING or PENDING in the series' own Prefect database (read
    directly: its server went with the run)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(prefect_home / "prefect.db")) as db:
        flows, tasks = (db.execute(f"SELECT count(*) FROM {table} WHERE state_type IN ('RUNNING', 'PENDING')")
                        .fetchone()[0] for table in ("flow_run", "task_run"))
    return flows, tasks


def mlflow_audit(series: Series, nodes: list[Node]) -> tuple[list[str], list[str], list[str]]:
    """(runs of the run's tree left RUNNING, candidates with an outcome but no run, node ids with
    more than one candidate run)."""
    from mlflow.tracking import MlflowClient

    from evoforge.infra.tracking import tracking_target
    from evoforge.infra.tracking_reconcile import RUNNING, all_runs

    with NodeStore(series.run_dir / "nodes.duckdb", read_only=True) as store:
        parent = store.get_meta("mlflow_parent_run_id")
    target = tracking_target(series.workspace.resolve(), "circle_packing")
    client = MlflowClient(tracking_uri=target.uri)
    exp = client.get_experiment_by_name(target.experiment).experiment_id
    every = all_runs(client, exp, "", deleted_too=True)
    tree = {parent}
    for _ in range(3):  # parent -> candidates -> trials
        tree |= {r.info.run_id for r in every if r.data.tags.get("mlflow.parentRunId") in tree}
    running = [r.info.run_name for r in every if r.info.run_id in tree and r.info.status == RUNNING]
    active = [r for r in every if r.data.tags.get("mlflow.parentRunId") == parent
              and r.info.lifecycle_stage == "active" and r.data.tags.get("kind") == "candidate"]
    counts: dict[str, int] = {}
    for r in active:
        counts[r.data.tags.get("node_id", "")] = counts.get(r.data.tags.get("node_id", ""), 0) + 1
    missing = [n.id for n in nodes if n.status.terminal and n.id not in counts]
    extra = [k for k, v in counts.items() if v > 1 or k not in {n.id for n in nodes if n.status.terminal}]
    return running, missing, extra


def sampler_matches(run_dir: Path, nodes: list[Node], sampler: str) -> bool:
    """True when the state the last session closed with equals a rebuild from the database."""
    from evoforge.flows.run_state import rebuild_pool
    from evoforge.infra.config import RunConfig
    from evoforge.stages.sample import rebuild_sampler
    from evoforge.stages.sample.resume import SAMPLER_STATE_META, sampler_state

    saved = json.loads((run_dir / "config.json").read_text())
    cfg = RunConfig(search=saved["search"], judge=saved["judge"])
    with NodeStore(run_dir / "nodes.duckdb", read_only=True) as store:
        closed, v = store.get_meta(SAMPLER_STATE_META), store.get_meta("pool_version", 0)
        maximize = store.get_meta("direction") == "maximize"
    pool, _ = rebuild_pool(nodes, maximize, v, cfg.judge.weight)
    rebuilt = sampler_state(rebuild_sampler(cfg.search, nodes, pool))
    assert cfg.search.sampler == sampler
    return closed is not None and json.loads(json.dumps(rebuilt)) == closed


def report(series: Series, result: Audit, code: int) -> str:
    """The figures, one per line."""
    return "\n".join([
        f"run: circle_packing, budget {series.budget}, {series.sessions} sessions, last exit {code}, "
        f"{series.wall_s:.0f} s",
        f"kills survived: {series.kills} (at {', '.join(series.kill_moments)})",
        f"evaluations: {result.evaluations} (budget {series.budget})",
        f"nodes lost: {len(result.lost)}",
        f"nodes duplicated: {len(result.duplicated)}",
        f"nodes stuck in flight: {len(result.stuck)}",
        f"MLflow runs left RUNNING: {len(result.mlflow_running)}; candidates without a run: "
        f"{len(result.mlflow_missing)}; with two: {len(result.mlflow_extra)}",
        f"MLflow reconciliations on resume: {len(result.reconciled)}"
        + "".join(f"\n  {line}" for line in result.reconciled),
        f"Prefect flow runs / task runs left RUNNING or PENDING: {result.prefect_unfinished[0]} / "
        f"{result.prefect_unfinished[1]}",
        f"sampler state equal to a rebuild: {result.sampler_equal}",
        f"orphan processes left: {len(series.orphans)}" + "".join(f"\n  {o}" for o in series.orphans),
        f"verdict: {'OK' if result.ok(series.budget, series.orphans) else 'FAILED'}",
    ])


def crash_series(root: Path, budget: int, kills: int, seed: int, workers: str = "research=4,engineer=3",
                 sampler: str = "ucb1") -> tuple[Series, Audit, int]:
    """Drive a series in `root` and audit it."""
    series = Series(root / "run", root / "ws", root / "prefect-home", budget)
    env = {**os.environ, "PREFECT_HOME": str(series.prefect_home)}
    code = drive(series, run_args(series, workers, seed, sampler), kills, seed, env)
    return series, audit(series, sampler), code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=300)
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", default="research=4,engineer=3")
    parser.add_argument("--sampler", default="ucb1")
    parser.add_argument("--dir", type=Path, help="work folder (default: a new temporary one)")
    ns = parser.parse_args(argv)
    root = ns.dir or Path(tempfile.mkdtemp(prefix="evoforge-crash-"))
    series, result, code = crash_series(root, ns.evals, ns.kills, ns.seed, ns.workers, ns.sampler)
    print(f"work folder: {root}")
    print(report(series, result, code))
    return 0 if result.ok(series.budget, series.orphans) and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

