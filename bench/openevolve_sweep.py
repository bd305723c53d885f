"""Sweep OpenEvolve example folders: does each one's own evaluate() work, and does `evoforge run` run it?

Every sub-folder of DIR holding an ``evaluator.py`` is one example. For each, the sweep

1. calls the folder's own ``evaluate(initial_program.*)`` the way OpenEvolve does (the folder
   on ``sys.path``, an ``async def`` awaited, evoforge's stand-in ``openevolve`` package on the
   path after it), in a subprocess with a timeout; and
2. runs ``evoforge run FOLDER`` unchanged (the offline proposer, ``--max-evals N``, cognition
   and MLflow off to keep it quick), in this process, one run folder per example under OUT;

then prints one table row per folder: own evaluate() works? / evoforge run ok? / best score.
``--examples`` defaults to the shape fixtures (tests/fixtures/openevolve_shapes); OpenEvolve's own
R and Rust examples are in tests/fixtures/openevolve_examples (tests/test_openevolve_examples.py
sweeps them); point it at a checkout of OpenEvolve's ``examples/`` to sweep all the real ones::

    python bench/openevolve_sweep.py                       # the fixtures, 8 evaluations each
    python bench/openevolve_sweep.py --examples tests/fixtures/openevolve_examples  # R and Rust
    python bench/openevolve_sweep.py --examples ~/openevolve/examples --max-evals 12 --json rows.json

Exit code 0 when every folder whose own evaluate() works also ran in evoforge, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-sweep-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.evaluators.evaluation import COMPAT_DIR  # noqa: E402
from evoforge.evaluators.task import EVALUATOR, TaskError, load_task  # noqa: E402
from evoforge.flows.cli import main as evoforge_main  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "openevolve_shapes"
SWEEP_CONFIG = "cognition:\n  enabled: false\ntracking:\n  mlflow: false\n"
# what OpenEvolve does with a folder: import evaluator.py with the folder on sys.path, call evaluate
_OWN_EVALUATE = r"""
import asyncio, importlib.util, inspect, json, sys
folder, program = sys.argv[1], sys.argv[2]
sys.path.insert(0, folder)
spec = importlib.util.spec_from_file_location("evaluation_module", folder + "/evaluator.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
result = module.evaluate(program)
if inspect.isawaitable(result):
    result = asyncio.run(result)
metrics = result if isinstance(result, dict) else getattr(result, "metrics", None)
if not isinstance(metrics, dict):
    raise TypeError(f"evaluate() returned {type(result).__name__}, not a dict or EvaluationResult")
print(json.dumps({k: v if isinstance(v, (int, float, str, bool)) else repr(v) for k, v in metrics.items()}))
"""


@dataclass
class Row:
    """One example folder's sweep result."""

    folder: str
    own_evaluate: str  # "yes", "yes (error entry: ...)" or "no: reason"
    evoforge_run: str  # "ok", "exit N: the one-line error", or "not loadable: ..."
    best_score: float | None = None
    evaluations: int | None = None
    language: str | None = None
    run_dir: str | None = None
    own_metrics: dict | None = None
    seconds: float = 0.0

    @property
    def own_ok(self) -> bool:
        return self.own_evaluate.startswith("yes")


def example_folders(root: Path) -> list[Path]:
    """Sub-folders of ``root`` that hold an evaluator.py, sorted by name."""
    return sorted(p for p in root.iterdir() if (p / EVALUATOR).is_file())


def own_evaluate(folder: Path, program: Path, timeout_s: float) -> tuple[str, dict | None]:
    """Whether the folder's own evaluate() returns metrics for its initial program."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(COMPAT_DIR)])}
    try:
        done = subprocess.run([sys.executable, "-c", _OWN_EVALUATE, str(folder), str(program)],
                              cwd=folder, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"no: timed out after {timeout_s:g} s", None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"no: {last[:160]}", None
    metrics = json.loads(done.stdout.strip().splitlines()[-1])
    error = metrics.get("error")
    if isinstance(error, str) and error.strip():
        return f"yes (error entry: {' '.join(error.split())[:80]})", metrics
    return "yes", metrics


def evoforge_run(folder: Path, out: Path, max_evals: int, accept_failing_seed: bool) -> dict:
    """`evoforge run FOLDER` in this process; its exit code, last error line and status.json."""
    run_dir = out / "runs" / folder.name
    config = out / "sweep.yaml"
    config.write_text(SWEEP_CONFIG)
    argv = ["run", str(folder), "--run-dir", str(run_dir), "--workspace", str(out / "workspace"),
            "--max-evals", str(max_evals), "--config", str(config), "--quiet"]
    if accept_failing_seed:
        argv.append("--accept-failing-seed")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = evoforge_main(argv)
    lines = [line for line in stderr.getvalue().splitlines() if line.startswith("evoforge: ")]
    status_file = run_dir / "status.json"
    status = json.loads(status_file.read_text()) if status_file.is_file() else {}
    return {"code": code, "error": lines[-1] if lines else "", "status": status, "run_dir": str(run_dir)}


def sweep(root: Path, out: Path, max_evals: int, accept_failing_seed: bool, timeout_s: float) -> list[Row]:
    """One row per example folder under ``root``."""
    rows = []
    for folder in example_folders(root):
        start = time.monotonic()
        try:
            task = load_task(folder)
        except TaskError as exc:
            rows.append(Row(folder.name, "not run", f"not loadable: {exc}"))
            continue
        verdict, metrics = own_evaluate(folder, task.root / task.program_name, timeout_s)
        run = evoforge_run(folder, out, max_evals, accept_failing_seed)
        status = run["status"]
        outcome = "ok" if run["code"] == 0 else f"exit {run['code']}: {run['error']}"
        rows.append(Row(folder.name, verdict, outcome, status.get("best_score"), status.get("evaluations"),
                        task.language, run["run_dir"], metrics, round(time.monotonic() - start, 1)))
    return rows


def table(rows: list[Row]) -> str:
    """The sweep as a Markdown table."""
    lines = ["| folder | own evaluate() works? | evoforge run ok? | best score | evaluations |",
             "|---|---|---|---|---|"]
    for row in rows:
        score = "-" if row.best_score is None else f"{row.best_score:.6g}"
        lines.append(f"| {row.folder} | {row.own_evaluate} | {row.evoforge_run[:160]} | {score} | "
                     f"{row.evaluations if row.evaluations is not None else '-'} |")
    ran = sum(1 for r in rows if r.own_ok and r.evoforge_run == "ok")
    lines.append(f"\n{len(rows)} folders; own evaluate() works in {sum(r.own_ok for r in rows)}; "
                 f"of those, {ran} ran in evoforge")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=Path, default=FIXTURES,
                        help="folder of example folders (default: the test fixtures)")
    parser.add_argument("--max-evals", type=int, default=8, help="evaluations per evoforge run")
    parser.add_argument("--out", type=Path, help="where the runs go (default: a new temp folder)")
    parser.add_argument("--accept-failing-seed", action="store_true",
                        help="pass --accept-failing-seed to every run")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for each own evaluate()")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if not args.examples.is_dir():
        print(f"openevolve_sweep: error: --examples {args.examples} is not a folder", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="evoforge-sweep-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = sweep(args.examples, out.resolve(), args.max_evals, args.accept_failing_seed, args.timeout)
    print(table(rows))
    print(f"runs in {out}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 0 if all(r.evoforge_run == "ok" for r in rows if r.own_ok) else 1


if __name__ == "__main__":
    sys.exit(main())
