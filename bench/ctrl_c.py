"""Ctrl+C: how long a run takes to stop, and to exit, after SIGINT while every LLM call hangs.

Each trial is the scenario of `tests/test_engine_defects.py::test_ctrl_c_...`: `evoforge run
circle_packing` against the LLM simulator with every call hanging for 120 s; once a research call
is in flight (status.json says so) it waits 0.5 s and sends SIGINT. It measures three figures from
the moment of the signal: `stop` (the engine has stopped: `interrupted` appears in run.log),
`closed` (run.log's `session closed` line: report.md written, the sinks' last records made) and
`exit` (the `evoforge run` process has exited, code 130: the shell's prompt is back; after the
close come the flow's end, the Prefect server's stop and the exit handlers). `exit` is what
docs/guide/watching.md promises. `released` is when the last process holding the run's output
ends: the watchdog (infra/reaper.py) checks that nothing of the run is left, then exits too.
`--load N` runs N busy loops (`python -c 'while 1: pass'`) beside the trials, as a loaded
machine would. It prints every trial and the min / median / max of each figure.

    python bench/ctrl_c.py --trials 10
    python bench/ctrl_c.py --trials 10 --load 2
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from evoforge.infra.llm_sim.process import SimConfig, SimulatorProcess

READY_WAIT_S = 300.0  # start-up (a fresh Prefect server, the seed's evaluation) on a loaded machine


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _research_busy(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "status.json").read_text()).get("research_busy", 0) >= 1
    except (OSError, ValueError):
        return False


def _closed_at(log: str) -> float:
    """The wall-clock time of run.log's `session closed` line (NaN when it has none)."""
    for line in log.splitlines():
        if " evoforge.session: session closed" in line:
            return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return float("nan")


def trial(base_url: str, root: Path) -> dict[str, float]:
    """One run, interrupted once a research call hangs: seconds from SIGINT to stop, to the
    session's close and to exit."""
    run_dir = root / "run"
    env = {**os.environ, "PREFECT_HOME": str(root / "prefect-home")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "evoforge.flows.cli", "run", "circle_packing", "--run-dir", str(run_dir),
         "--workspace", str(root / "ws"), "--llm-base-url", base_url, "--no-mlflow", "--max-evals", "20"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)  # never full
    reader.start()
    deadline = time.monotonic() + READY_WAIT_S
    while not _research_busy(run_dir):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            reader.join(60)
            raise RuntimeError(f"no research call in flight within {READY_WAIT_S} s: {err}")
        time.sleep(0.2)
    time.sleep(0.5)  # the calls hang now
    signalled, wall = time.monotonic(), time.time()
    proc.send_signal(signal.SIGINT)
    while "interrupted" not in _text(run_dir / "run.log") and time.monotonic() - signalled < 30:
        time.sleep(0.02)
    stop_s = time.monotonic() - signalled
    while proc.poll() is None and time.monotonic() - signalled < 60:
        time.sleep(0.005)
    exit_s = time.monotonic() - signalled
    reader.join(60)  # its output ends once the watchdog has let go of it too
    released_s = time.monotonic() - signalled
    if proc.returncode != 130:
        raise RuntimeError(f"exit code {proc.returncode}, expected 130: {err}")
    closed_s = _closed_at(_text(run_dir / "run.log")) - wall
    return {"stop_s": round(stop_s, 3), "closed_s": round(closed_s, 3), "exit_s": round(exit_s, 3),
            "released_s": round(released_s, 3)}


def summary(values: list[float]) -> str:
    return f"min {min(values):.2f}  median {statistics.median(values):.2f}  max {max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--load", type=int, default=0, help="busy loops running beside the trials")
    parser.add_argument("--json", type=Path, help="write the trials and the summary here")
    ns = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(ns.load)]
    results = []
    try:
        with SimulatorProcess(SimConfig(median_s=0.01, slots=8, seed=1, error_rate=1.0,
                                        error_kinds=("hang",), hang_s=120)) as sim:
            for i in range(ns.trials):
                with tempfile.TemporaryDirectory(prefix="evoforge-ctrl-c-") as root:
                    results.append(trial(sim.base_url, Path(root)))
                last = results[-1]
                print(f"trial {i + 1}: stop {last['stop_s']:.2f} s, closed {last['closed_s']:.2f} s, "
                      f"exit {last['exit_s']:.2f} s, released {last['released_s']:.2f} s "
                      f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    stops, exits = [r["stop_s"] for r in results], [r["exit_s"] for r in results]
    closes, releases = [r["closed_s"] for r in results], [r["released_s"] for r in results]
    print(f"load {ns.load} busy loops, {len(results)} trials, {os.cpu_count()} CPUs, "
          f"load average at the end {os.getloadavg()[0]:.1f}")
    print(f"  stop (SIGINT -> 'interrupted' in run.log), s: {summary(stops)}")
    print(f"  closed (SIGINT -> 'session closed'), s:      {summary(closes)}")
    print(f"  exit (SIGINT -> process gone, code 130), s:   {summary(exits)}")
    print(f"  released (SIGINT -> its output closed), s:    {summary(releases)}")
    if ns.json:
        ns.json.write_text(json.dumps({"load": ns.load, "cpus": os.cpu_count(), "trials": results}, indent=2))


if __name__ == "__main__":
    main()
