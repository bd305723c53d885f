"""How near evoforge runs to its physical limit, in one table, one sitting (issues 12 and 18).

Parts (``--part``, comma-separated; default all), each over ``--seeds`` seeds:

- ``overhead``: the sandbox's per-evaluation overhead, p50/p95, cold and warm: the wall time of
  ``evaluate_program`` (circle_packing's seed, sequentially) minus the evaluator's own time,
  which is the median of ``evaluate(program)`` called in this process. The first call of each
  mode (disk cache, the fork server's start) is reported apart, not in the percentiles.
- ``throughput``: candidates/min and its ratio to the bound
  ``min(slots / LLM slot-s per candidate, workers / mean evaluation s)`` at three settings: slow
  (simulator median 2 s, circle_packing), fast (median 0.3 s, circle_packing) and eval-bound
  (bench/tasks/cpu_burn: ~1 CPU-s per evaluation, median 0.3 s), every run at the defaults
  (an empty config file: MLflow, Prefect task runs, analysis, the cognition base all on). The
  evaluation time is measured alone, before the runs (the seed program, sequentially, with the
  run's sandbox settings); the LLM's from the simulator's books (busy slot-seconds per candidate).
  The rate and the CPU per candidate are the steady state, read from the run's own timeline
  between the line where 10% of the evaluations were done and the last: CPU by place (the event
  loop's thread, the whole flow process, the sinks' threads, the fork servers, the evaluation
  children), and apart the Prefect server's and the simulator's processes. The records' lag (the
  oldest event not yet written) and how long after its evaluation each MLflow run was written.
- ``analysis``: the slow LLM with the Analyzer's cost settings (every candidate, a share, batches,
  an endpoint of its own, off): candidates/min, LLM calls per candidate, research utilisation.
- ``spec``: bin_packing at the fast setting, without and with speculation (alpha 0.25, reordering
  w=3), through bench/async_policies.py's ``one_run`` (the issue-3 figures' code path, MLflow
  off): validations/min, the speed-up, rollback rate, wasted evaluation seconds, and the
  arithmetic behind the speed-up (cases run per candidate, mean seconds of a pruned and of a
  full evaluation).

Runs use 8 simulator slots, ``--workers research=8,engineer=2``. The sandbox is warm when
``SandboxLimits`` has a ``warm`` field (the config's default); otherwise the warm column says
"warm: not available".

    python bench/near_limit.py                      # the full sitting: 3 seeds, ~15 min on 2 cores
    python bench/near_limit.py --quick --part spec  # a smoke run of one part
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # noqa: E402
from async_policies import CONFIGS_B, _nodes  # noqa: E402  (sets PREFECT_HOME first)
from async_policies import one_run as policy_run  # noqa: E402

from evoforge.evaluators.cases import list_cases  # noqa: E402
from evoforge.evaluators.evaluation import evaluate_program  # noqa: E402
from evoforge.evaluators.sandbox import SandboxLimits  # noqa: E402
from evoforge.evaluators.task import Task, load_task  # noqa: E402
from evoforge.flows.cli import main  # noqa: E402
from evoforge.flows.session import sandbox_limits as _limits  # noqa: E402  (the run's own limits)
from evoforge.infra.config_load import load_config  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.infra.timeline import read_timeline  # noqa: E402

WARM_AVAILABLE = "warm" in {f.name for f in dataclasses.fields(SandboxLimits)}
CPU_BURN = str(Path(__file__).resolve().parent / "tasks" / "cpu_burn")
SLOTS, ENGINEERS, SIGMA = 8, 2, 0.6
SETTINGS = {  # name: task, simulator median s, evaluations (full, --quick), target ratio
    "slow": ("circle_packing", 2.0, (90, 16), 0.95),
    "fast": ("circle_packing", 0.3, (300, 30), 0.8),
    "eval-bound": (CPU_BURN, 0.3, (75, 12), 0.95),
}
SPEC_CONFIGS = ("async-full", "async-full+spec0.25")  # CONFIGS_B's without / with speculation
SPEC_EVALS, ALPHA = (120, 30), CONFIGS_B["async-full+spec0.25"]["speculation"]["alpha_spec"]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _limits_for(task: Task, warm: bool | None, config: Path | None = None) -> SandboxLimits:
    """The sandbox limits a run with `config` uses; `warm` forces the mode (when there is one)."""
    limits = _limits(task, load_config(config))
    return dataclasses.replace(limits, warm=warm) if WARM_AVAILABLE and warm is not None else limits


def _sandbox_mode(limits: SandboxLimits) -> str:
    return "warm" if getattr(limits, "warm", False) else "cold"


def _own_times(task: Task, reps: int) -> list[float]:
    """Wall seconds of the task's `evaluate(program)` called in this process."""
    spec = importlib.util.spec_from_file_location("bench_evaluator", task.evaluator_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    program = Path(tempfile.mkdtemp(prefix="evoforge-own-")) / task.program_name
    program.write_text(task.initial_code)
    module.evaluate(str(program))  # imports and caches outside the timing
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        module.evaluate(str(program))
        times.append(time.perf_counter() - start)
    return times


async def _sandbox_times(task: Task, limits: SandboxLimits, reps: int) -> list[float]:
    """Wall seconds of `reps` sequential sandboxed evaluations of the task's seed program."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        outcome = await evaluate_program(task, task.initial_code, limits=limits)
        times.append(time.perf_counter() - start)
        if not outcome.ok:
            raise RuntimeError(f"{task.name}: the seed failed in the sandbox: {outcome.error}")
    return times


def overhead_rows(seed: int, quick: bool) -> list[dict]:
    """Sandbox overhead above the evaluator's own time, cold and warm (circle_packing)."""
    task = load_task("circle_packing")
    own = statistics.median(_own_times(task, 20 if quick else 200))
    reps = 5 if quick else 40
    rows = []
    for warm in (False, True):
        row = {"part": "overhead", "setting": "warm" if warm else "cold", "seed": seed,
               "own_ms": own * 1000}
        if warm and not WARM_AVAILABLE:
            rows.append({**row, "note": "warm: not available"})
            continue
        walls = asyncio.run(_sandbox_times(task, _limits_for(task, warm), reps + 1))
        over = [(w - own) * 1000 for w in walls[1:]]
        rows.append({**row, "overhead_p50_ms": _pct(over, 0.5), "overhead_p95_ms": _pct(over, 0.95),
                     "first_call_ms": walls[0] * 1000, "evaluations": reps})
    return rows


def _steady_per_min(run_dir: Path) -> float | None:
    """Evaluations per minute after the first 10% (ramp-up: the seed, the first LLM answers)."""
    done = sorted(n.evaluated_at for n in _nodes(run_dir) if n.evaluated_at is not None)
    skip = max(2, len(done) // 10)
    if len(done) - skip < 3 or done[-1] <= done[skip]:
        return None
    return (len(done) - 1 - skip) / (done[-1] - done[skip]) * 60


def _steady(run_dir: Path) -> dict:
    """The run's steady state from its timeline: candidates/min and CPU per candidate by place,
    between the line where 10% of the evaluations were done and the last line (ramp-up and
    start-up left out), and the longest the records lagged in that stretch."""
    rows = [r for r in read_timeline(run_dir / "timeline.jsonl") if "cpu" in r]
    last = rows[-1]
    first = next(r for r in rows if r["evaluations"] >= max(3, last["evaluations"] // 10))
    done = last["evaluations"] - first["evaluations"]
    span = last["wall_s"] - first["wall_s"]
    per = {f"{k.removesuffix('_s')}_ms": 1000 * (last["cpu"][k] - first["cpu"][k]) / max(1, done)
           for k in last["cpu"]}
    lags = [r.get("records_lag_s", 0.0) for r in rows if r["wall_s"] > first["wall_s"]]
    return {"steady_per_min": 60 * done / span if span > 0 else None, **per,
            "steady_lag_max_s": max(lags) if lags else None}


def _mlflow_delay(run_dir: Path, workspace: Path) -> dict:
    """How long after its evaluation ended each candidate's MLflow run was written (p50, max)."""
    from mlflow.tracking import MlflowClient

    status = json.loads((run_dir / "status.json").read_text())
    if not status.get("mlflow_run_id"):
        return {}
    client = MlflowClient(f"sqlite:///{workspace / 'mlflow.db'}")
    parent = client.get_run(status["mlflow_run_id"])
    runs = client.search_runs([parent.info.experiment_id],
                              f"tags.mlflow.parentRunId = '{parent.info.run_id}' and tags.kind = 'candidate'",
                              max_results=5000)
    ended = {n.id: n.evaluated_at for n in _nodes(run_dir) if n.evaluated_at}
    delays = sorted(r.info.start_time / 1000 - ended[r.data.tags["node_id"]] for r in runs
                    if r.data.tags.get("node_id") in ended)
    return {"mlflow_delay_p50_s": _pct(delays, 0.5), "mlflow_delay_max_s": delays[-1]} if delays else {}


def _process_cpu(pid: int | None) -> float:
    """CPU seconds of a process and its children (0 when unknown)."""
    if pid is None:
        return 0.0
    try:
        proc = psutil.Process(pid)
        total = sum(proc.cpu_times()[:2])
        return total + sum(sum(c.cpu_times()[:2]) for c in proc.children(recursive=True))
    except psutil.Error:
        return 0.0


def _prefect_server_pid() -> int | None:
    """The temporary Prefect server this process started (a child running Prefect's API)."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any("prefect.server.api.server" in part for part in child.cmdline()):
                return child.pid
    return None


def _run(sim: SimulatorProcess, task: str, evals: int, seed: int, root: Path, config: Path,
         name: str, analysis_sim: SimulatorProcess | None = None) -> dict:
    """One evoforge run at defaults (MLflow and Prefect on), with its CPU and LLM books."""
    run_dir = root / f"{name}-{seed}-{evals}"
    sim.reset(seed=seed)
    server = _prefect_server_pid()
    before = {"prefect": _process_cpu(server), "simulator": _process_cpu(sim.pid)}
    books = sim.stats()
    code = main(["run", task, "--run-dir", str(run_dir), "--workspace", str(root / "ws"),
                 "--config", str(config), "--llm-base-url", sim.base_url, "--max-evals", str(evals),
                 "--workers", f"research={SLOTS},engineer={ENGINEERS}", "--seed", str(seed), "--quiet"])
    status = json.loads((run_dir / "status.json").read_text())
    after = sim.stats()
    completed = after["completed"] - books["completed"]
    busy = after["busy_slot_seconds"] - books["busy_slot_seconds"]
    evaluations = max(1, status["evaluations"])
    nodes = [n for n in _nodes(run_dir) if n.was_evaluated and n.origin != "seed"]
    analysis_calls = analysis_sim.stats()["completed"] if analysis_sim is not None else 0
    server = server or _prefect_server_pid()
    return {"exit": code, "evaluations": status["evaluations"], "wall_s": status["wall_s"],
            "run_per_min": status["candidates_per_min"], **_steady(run_dir),
            "prefect_server_ms": 1000 * (_process_cpu(server) - before["prefect"]) / evaluations,
            "simulator_ms": 1000 * (_process_cpu(sim.pid) - before["simulator"]) / evaluations,
            "eval_wall_p50_ms": 1000 * statistics.median(n.eval_s for n in nodes) if nodes else None,
            "llm_requests": completed, "calls_per_candidate": (completed + analysis_calls) / evaluations,
            "llm_latency_s": busy / completed if completed else None,
            "llm_busy": busy / (SLOTS * status["wall_s"]) if status["wall_s"] else None,
            "llm_slot_s_per_candidate": busy / evaluations,
            "tracking_failures": len(status.get("tracking_failures") or {}),
            **_mlflow_delay(run_dir, root / "ws")}


def _bounded(row: dict, eval_alone: float) -> dict:
    """The row with its bound (LLM or evaluation) and its ratio to it."""
    llm_bound = 60 * SLOTS / row["llm_slot_s_per_candidate"]
    eval_bound = 60 * ENGINEERS / eval_alone
    bound = min(llm_bound, eval_bound)
    return {**row, "llm_bound_per_min": llm_bound, "eval_bound_per_min": eval_bound,
            "bound_per_min": bound, "binding": "LLM" if llm_bound <= eval_bound else "evaluation",
            "ratio_to_bound": (row["steady_per_min"] or 0) / bound,
            "run_ratio_to_bound": row["run_per_min"] / bound,
            "evoforge_ms": row["process_ms"] + row["fork_servers_ms"]}


def throughput_rows(seeds: int, quick: bool, root: Path, only: list[str]) -> list[dict]:
    """Candidates/min against the bound, and the orchestration's CPU per candidate, per setting."""
    rows = []
    for setting in only:
        task_name, median, budgets, target = SETTINGS[setting]
        evals = budgets[1] if quick else budgets[0]
        config = root / f"{setting}.yaml"
        config.write_text("{}")  # the defaults; a file, so a later default change shows up here
        task = load_task(task_name)
        limits = _limits_for(task, None, config)
        alone = asyncio.run(_sandbox_times(task, limits, 4 if quick else 12))[1:]  # first: warm-up
        eval_alone = statistics.mean(alone)
        with SimulatorProcess(SimConfig(median_s=median, sigma=SIGMA, slots=SLOTS)) as sim:
            for seed in range(seeds):
                run = _run(sim, task_name, evals, seed, root, config, setting)
                rows.append(_bounded({"part": "throughput", "setting": setting, "seed": seed, **run,
                                      "sandbox": _sandbox_mode(limits), "eval_alone_s": eval_alone,
                                      "target_ratio": target}, eval_alone))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


ANALYSIS = {  # name: (config, whether analysis gets an endpoint of its own: a second simulator)
    "analyze every candidate": ({}, False),
    "analyze.share 0.25": ({"analyze": {"share": 0.25}}, False),
    "analyze.batch 4": ({"analyze": {"batch": 4}}, False),
    "analyze.llm (own endpoint)": ({}, True),
    "analyze off": ({"analyze": {"enabled": False}}, False),
}


def analysis_rows(seeds: int, quick: bool, root: Path) -> list[dict]:
    """The slow LLM (median 2 s, 8 slots) with analysis's settings: candidates/min, LLM calls per
    candidate and the research endpoint's utilisation (an own analysis endpoint apart)."""
    evals = 20 if quick else 90
    task = load_task("circle_packing")
    eval_alone = statistics.mean(asyncio.run(_sandbox_times(task, _limits_for(task, None), 6))[1:])
    rows = []
    with SimulatorProcess(SimConfig(median_s=2.0, sigma=SIGMA, slots=SLOTS)) as sim:
        for name, (overrides, own) in ANALYSIS.items():
            for seed in range(seeds):
                with contextlib.ExitStack() as stack:
                    other = (stack.enter_context(SimulatorProcess(SimConfig(median_s=0.5, sigma=SIGMA,
                                                                            slots=SLOTS)))
                             if own else None)
                    cfg = dict(overrides)
                    if other is not None:
                        cfg["analyze"] = {"llm": {"base_url": other.base_url}}
                    config = root / f"analysis-{len(rows)}.yaml"
                    config.write_text(json.dumps(cfg))
                    run = _run(sim, "circle_packing", evals, seed, root, config, f"analysis-{len(rows)}",
                               analysis_sim=other)
                rows.append(_bounded({"part": "analysis", "setting": name, "seed": seed, **run,
                                      "sandbox": "warm", "eval_alone_s": eval_alone, "target_ratio": 0.95},
                                     eval_alone))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def _cost_fit(pruned_s: float, full_s: float, prefix: int, cases: int) -> dict:
    """An evaluation's seconds as fixed + cases x per-case, fitted to a pruned and a full one."""
    per_case = (full_s - pruned_s) / (cases - prefix)
    return {"per_case_s": per_case, "fixed_eval_s": pruned_s - prefix * per_case}


def spec_rows(seeds: int, quick: bool, root: Path) -> list[dict]:
    """bin_packing without / with speculation at the fast setting, with the arithmetic behind it."""
    evals = SPEC_EVALS[1] if quick else SPEC_EVALS[0]
    args = argparse.Namespace(evals=evals, engineers=ENGINEERS, base_config="{}")
    cases = len(asyncio.run(list_cases(load_task("bin_packing"))))
    rows = []
    with SimulatorProcess(SimConfig(median_s=0.3, sigma=SIGMA, slots=SLOTS)) as sim:
        for seed in range(seeds):
            for name in SPEC_CONFIGS:
                row = policy_run(sim, "bin_packing", name, CONFIGS_B[name], seed, args, root, SLOTS, "fast")
                nodes = [n for n in _nodes(root / f"fast-bin_packing-{name}-{seed}") if n.was_evaluated]
                pruned = [n.eval_s for n in nodes if n.status == "pruned"]
                full = [n.eval_s for n in nodes if n.cases_done == cases]
                fit = _cost_fit(statistics.mean(pruned), statistics.mean(full), math.ceil(ALPHA * cases),
                                cases) if pruned and full else {}
                row.update({
                    "part": "spec", "setting": name, "seed": seed, **fit,
                    "steady_per_min": _steady_per_min(root / f"fast-bin_packing-{name}-{seed}"),
                    "cases_per_candidate": statistics.mean(n.cases_done for n in nodes) if nodes else None,
                    "full_eval_s": statistics.mean(full) if full else None,
                    "pruned_eval_s": statistics.mean(pruned) if pruned else None,
                    "rollback_rate": row["rolled_back"] / row["released"] if row["released"] else None,
                    "released_share": row["released"] / max(1, row["evaluations"]),
                })
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    by_seed = {r["seed"]: r for r in rows if r["setting"] == SPEC_CONFIGS[0]}
    for r in rows:
        base = by_seed[r["seed"]]
        r["speedup"] = r["validations_per_min"] / base["validations_per_min"]
        if r["steady_per_min"] and base["steady_per_min"]:
            r["speedup_steady"] = r["steady_per_min"] / base["steady_per_min"]
        r["case_bound_speedup"] = cases / r["cases_per_candidate"] if r["cases_per_candidate"] else None
    return rows


FIGURES = {  # part: (figure key, label, target) in table order
    "overhead": [("own_ms", "evaluator's own time, ms", ""),
                 ("overhead_p50_ms", "sandbox overhead p50, ms", "warm <= 15"),
                 ("overhead_p95_ms", "sandbox overhead p95, ms", ""),
                 ("first_call_ms", "first call, ms (not in p50/p95)", "")],
    "throughput": [("eval_alone_s", "evaluation alone, s", ""),
                   ("eval_wall_p50_ms", "evaluation wall in the run, p50 ms", ""),
                   ("llm_latency_s", "LLM service latency, s", ""),
                   ("llm_slot_s_per_candidate", "LLM slot-s per candidate", ""),
                   ("llm_busy", "LLM utilisation (busy slots / slots)", ""),
                   ("bound_per_min", "bound, candidates/min", ""),
                   ("steady_per_min", "candidates/min (steady state)", ""),
                   ("ratio_to_bound", "ratio to the bound", "target"),
                   ("run_ratio_to_bound", "ratio, whole run incl. ramp-up", ""),
                   ("loop_ms", "event-loop thread CPU ms/candidate", "<= 20"),
                   ("evoforge_ms", "evoforge CPU ms/candidate (flow process + fork servers)", "<= 60"),
                   ("sinks_ms", "of which the sinks' threads", ""),
                   ("fork_servers_ms", "of which the fork servers", ""),
                   ("evaluations_ms", "evaluation children CPU ms/candidate (the task's work)", ""),
                   ("prefect_server_ms", "Prefect's server CPU ms/candidate (apart)", ""),
                   ("simulator_ms", "LLM simulator CPU ms/candidate (apart)", ""),
                   ("steady_lag_max_s", "records lag, steady state, max s", "<= 10"),
                   ("mlflow_delay_p50_s", "MLflow run written after its evaluation, p50 s", ""),
                   ("mlflow_delay_max_s", "MLflow run written after its evaluation, max s", ""),
                   ("tracking_failures", "sinks that failed", "0"),
                   ("wall_s", "run wall s", "")],
    "analysis": [("steady_per_min", "candidates/min (steady state)", ""),
                 ("calls_per_candidate", "LLM calls per candidate (both endpoints)", ""),
                 ("llm_busy", "research LLM utilisation", ""),
                 ("ratio_to_bound", "ratio to the bound", ""),
                 ("evoforge_ms", "evoforge CPU ms/candidate", "")],
    "spec": [("validations_per_min", "validations/min, whole run", ""),
             ("speedup", "speed-up over no speculation, whole run", ">= 3"),
             ("steady_per_min", "validations/min, steady state", ""),
             ("speedup_steady", "speed-up, steady state", ">= 3"),
             ("cases_per_candidate", "cases run per candidate (of 40)", ""),
             ("case_bound_speedup", "case-count bound on the speed-up", ""),
             ("full_eval_s", "full evaluation, s", ""),
             ("pruned_eval_s", "pruned evaluation, s", ""),
             ("fixed_eval_s", "fit: fixed s per evaluation", ""),
             ("per_case_s", "fit: s per case", ""),
             ("released_share", "released share of evaluations", ""),
             ("rollback_rate", "rollback rate (of released)", ""),
             ("wasted_eval_s", "wasted evaluation s", ""),
             ("evaluations", "evaluations", ""),
             ("best", "best score reached", "")],
}


def _cell(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def table(rows: list[dict]) -> str:
    """One markdown table: a line per figure, its mean over seeds and each seed's value."""
    lines = ["| part | setting | figure | mean | per seed | target |", "|---|---|---|---|---|---|"]
    settings = list(dict.fromkeys((r["part"], r["setting"]) for r in rows))
    for part, setting in settings:
        group = [r for r in rows if r["part"] == part and r["setting"] == setting]
        label = setting
        if part in ("throughput", "analysis"):
            label = f"{setting} ({group[0]['sandbox']} sandbox, {group[0]['binding']}-bound)"
        if group[0].get("note"):
            lines.append(f"| {part} | {label} | {group[0]['note']} | - | - | - |")
            continue
        for key, name, target in FIGURES[part]:
            values = [r.get(key) for r in group]
            numbers = [v for v in values if isinstance(v, int | float)]
            mean = _cell(float(statistics.mean(numbers))) if numbers else "-"
            seeds = " / ".join(_cell(v) if v is not None else "-" for v in values)
            goal = f">= {group[0]['target_ratio']}" if target == "target" else target
            if part == "spec" and key.startswith("speedup") and setting == SPEC_CONFIGS[0]:
                goal = ""
            lines.append(f"| {part} | {label} | {name} | {mean} | {seeds} | {goal} |")
    return "\n".join(lines)


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--part", default="overhead,throughput,analysis,spec",
                        help="comma-separated, run in this order: overhead, throughput, analysis, spec")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help=f"throughput settings to run: {', '.join(SETTINGS)}")
    parser.add_argument("--quick", action="store_true", help="small budgets: a smoke run")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args()
    parts = args.part.split(",")
    unknown = sorted(set(parts) - set(FIGURES)) or sorted(set(args.settings.split(",")) - set(SETTINGS))
    if unknown:
        parser.error(f"unknown part or setting: {', '.join(unknown)}")
    root = Path(tempfile.mkdtemp(prefix="evoforge-near-limit-"))
    main(["run", "circle_packing", "--run-dir", str(root / "warmup"), "--workspace", str(root / "ws"),
          "--max-evals", "2", "--quiet"])  # Prefect's server, MLflow's store: started outside the timing
    started = time.time()
    rows: list[dict] = []
    for part in parts:  # in the order given
        if part == "overhead":
            rows += [row for seed in range(args.seeds) for row in overhead_rows(seed, args.quick)]
        elif part == "throughput":
            rows += throughput_rows(args.seeds, args.quick, root, args.settings.split(","))
        elif part == "analysis":
            rows += analysis_rows(args.seeds, args.quick, root)
        else:
            rows += spec_rows(args.seeds, args.quick, root)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"near_limit{'_quick' if args.quick else ''}_{'-'.join(parts)}.json"
    out.write_text(json.dumps({"started": started, "seconds": time.time() - started,
                               "warm_available": WARM_AVAILABLE, "quick": args.quick,
                               "rows": rows}, indent=2))
    print(table(rows))
    print(f"\n{len(rows)} rows in {time.time() - started:.0f} s; JSON: {out}")


if __name__ == "__main__":
    main_bench()
