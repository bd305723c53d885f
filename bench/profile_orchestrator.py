"""Orchestrator CPU per candidate on the LLM simulator, and (with --profile) where it goes.

One async run of circle_packing (Prefect task runs on; MLflow on unless --no-mlflow), driven in
this process as `bench/async_vs_sync.py` drives it. CPU is RUSAGE_SELF of this process (flow,
stages, the head, the sinks' threads, Prefect's client threads); evaluation subprocesses, the
simulator and Prefect's server are other processes and not counted (`bench/near_limit.py` reports
them apart).

Start-up is kept apart from the per-candidate figure: the window opens when the `--skip`-th
candidate finishes (the head applies it) and closes when the last one does, so Prefect's server
start, the seed evaluation and the closing report are outside it (they are reported as `startup_cpu_s` and
`closing_cpu_s`). `sink_backlog_at_last` is the number of events the sinks had still queued when
the window closed (work the window does not see; it should be small).

    python bench/profile_orchestrator.py --median 0.3 --sigma 0.6 --slots 8 --evals 200
    python bench/profile_orchestrator.py --evals 200 --profile   # + a per-component breakdown
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="evoforge-bench-prefect-"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from evoforge.cognition.store import CognitionBase  # noqa: E402
from evoforge.flows.cli import main  # noqa: E402
from evoforge.flows.head import Head  # noqa: E402
from evoforge.infra.llm_sim.process import SimulatorProcess  # noqa: E402
from evoforge.infra.llm_sim.server import SimConfig  # noqa: E402
from evoforge.stages.sinks.hub import SinkHub  # noqa: E402

ROOT = Path(sys.modules[main.__module__].__file__).resolve().parents[1]  # the package's folder

# Components, as (name, entry points whose inclusive CPU time counts for it), an entry point being
# `module-path-suffix:qualified-name` as yappi names it. They may nest (a stage's time includes its
# LLM call): the table is a map of where the time goes, not a partition.
COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("head: apply a finished candidate", ("flows/head.py:Head.finished",)),
    ("head: remember a proposal", ("flows/head.py:Head.proposed",)),
    ("sink: node database (DuckDB)", ("stages/sinks/node_db.py:NodeDatabase.record",)),
    ("sink: run files and snapshots", ("stages/sinks/run_files.py:RunFiles.record",)),
    ("sink: MLflow runs, metrics, traces", ("stages/sinks/mlflow_sink.py:MlflowRecords.record",)),
    ("sink: Prefect artifacts", ("stages/sinks/prefect_sink.py:PrefectArtifacts.record",)),
    ("sink: cognition write-back", ("stages/sinks/cognition_sink.py:CognitionWriteBack.record",)),
    ("sink: per-model accounting", ("stages/sinks/model_usage.py:ModelAccounting.record",)),
    ("status/timeline snapshot", ("infra/timeline.py:Timeline.append",)),
    ("minilm embeddings (all callers)", ("cognition/minilm.py:MiniLMEmbedder.embed",)),
    ("learn stage (cognition retrieval)", ("stages/learn.py:Learn.run",)),
    ("research stage (prompt + LLM call + parse)", ("stages/research.py:research",)),
    ("analyze stage (LLM call + parse)", ("stages/analyze.py:analyze",)),
    ("engineer stage (novelty, checks, evaluation)", ("stages/engineer.py:engineer",)),
    ("  of which: evaluation job (sandbox driver)", ("stages/evaluation/job.py:run_evaluation",)),
    ("  of which: novelty", ("stages/population/novelty.py:novelty_rejection",)),
    ("openai client: chat call", ("infra/llm/openai_backend.py:OpenAIBackend.complete",)),
    ("sampling (draw_item)", ("stages/pipeline/draw.py:draw_item",)),
    ("stage task runs (Prefect engine around a stage)", ("prefect/task_engine.py:run_task_async",)),
]


class BasesMade:
    """The cognition bases opened while installed, to read their memos' hits after the run."""

    def __init__(self) -> None:
        self.bases: list[CognitionBase] = []

    def install(self) -> None:
        real = CognitionBase.__init__
        made = self.bases

        def init(base: CognitionBase, *args: Any, **kwargs: Any) -> None:
            real(base, *args, **kwargs)
            made.append(base)

        CognitionBase.__init__ = init  # type: ignore[method-assign]

    def memo_counts(self) -> dict[str, dict[str, int]]:
        """Hits and misses of the query-embedding and search memos, summed over the bases."""
        counts: dict[str, dict[str, int]] = {}
        for name in ("vector_memo", "search_memo"):
            memos = [getattr(base, name) for base in self.bases if hasattr(base, name)]
            counts[name] = {"hits": sum(m.hits for m in memos), "misses": sum(m.misses for m in memos)}
        return counts


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each live thread of this process, by Python thread name (native threads
    of libraries, e.g. torch's or LanceDB's, by their kernel name), summed over same names."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = defaultdict(float)
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                comm, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        name = names.get(int(tid)) or "native:" + comm.split("(", 1)[1]
        out[name.rstrip("0123456789_-")] += (int(fields[11]) + int(fields[12])) / tick
    return dict(out)


class Window:
    """Stamps this process's CPU at each finished candidate (wraps Head.finished)."""

    def __init__(self, skip: int, last: int, on_open: Any = None, on_close: Any = None):
        self.skip, self.last, self.on_open, self.on_close = skip, last, on_open, on_close
        self.count = 0
        self.stamps: dict[str, float] = {}
        self.backlog = 0
        self.hubs: list[SinkHub] = []

    def install(self) -> None:
        finished, init = Head.finished, SinkHub.__init__
        window = self

        def on_finished(head: Head, item: Any) -> Any:
            out = finished(head, item)
            window.count += 1
            if window.count == window.skip:
                window.threads_open = thread_cpu()
                window.stamps["open"] = _cpu_self()
                window.stamps["open_wall"] = time.monotonic()
                if window.on_open:
                    window.on_open()
            if window.count > window.skip:  # the last stamp closes the window
                if head.state.stats.evaluations >= window.last and window.on_close:
                    window.on_close()
                    window.on_close = None
                window.stamps["close"] = _cpu_self()
                window.threads_close = thread_cpu()
                window.stamps["close_wall"] = time.monotonic()
                window.closed_count = window.count
                window.backlog = sum(len(r.queue) for h in window.hubs for r in h._runners.values())
            return out

        def hub_init(hub: SinkHub, *args: Any, **kwargs: Any) -> None:
            init(hub, *args, **kwargs)
            window.hubs.append(hub)

        Head.finished = on_finished  # type: ignore[method-assign]
        SinkHub.__init__ = hub_init  # type: ignore[method-assign]


def breakdown(window_candidates: int) -> tuple[list[tuple[str, float]], list[tuple[str, float]], float]:
    """(component, ms/candidate), (top self-time functions, ms/candidate), total ms/candidate."""
    import yappi

    stats = yappi.get_func_stats()
    by_key: dict[str, Any] = {}
    for s in stats:
        by_key[f"{s.module}:{s.name}"] = s
    per = 1000.0 / max(window_candidates, 1)
    rows = []
    for name, entries in COMPONENTS:
        total = 0.0
        for s in stats:
            if any(s.module.endswith(e.split(":")[0]) and s.name == e.split(":")[1] for e in entries):
                total += s.ttot
        rows.append((name, total * per))
    threads = sum(t.ttot for t in yappi.get_thread_stats())
    selfs: dict[str, float] = defaultdict(float)
    for s in stats:
        selfs[f"{s.module.split('site-packages/')[-1]}:{s.lineno} {s.name}"] += s.tsub
    top = sorted(selfs.items(), key=lambda kv: -kv[1])[:40]
    return rows, [(k, v * per) for k, v in top], threads * per


def by_package() -> dict[str, float]:
    """Self CPU seconds per library (site-packages folder), evoforge module or stdlib module."""
    import yappi

    out: dict[str, float] = defaultdict(float)
    for s in yappi.get_func_stats():
        path = s.module
        if "site-packages/" in path:
            key = path.split("site-packages/")[1].split("/")[0]
        elif path.startswith(str(ROOT)):
            key = "evoforge/" + os.path.relpath(path, ROOT)
        else:
            key = "stdlib/" + Path(path).name
        out[key] += s.tsub
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="evoforge-profile-"))
    on_open = on_close = None
    if args.profile:
        import yappi

        def on_open() -> None:  # at the window's opening; threads made before it are profiled too
            yappi.set_clock_type("cpu")
            yappi.clear_stats()
            yappi.start(builtins=False, profile_threads=True)

        on_close = yappi.stop
    if args.cprofile:  # the event loop's thread only, on its own CPU clock
        import cProfile

        main_profile = cProfile.Profile(time.thread_time)
        on_open, on_close = main_profile.enable, main_profile.disable
    window = Window(args.skip, args.evals, on_open, on_close)
    window.install()
    with SimulatorProcess(SimConfig(median_s=args.median, sigma=args.sigma, slots=args.slots)) as sim:
        main(["run", "circle_packing", "--run-dir", str(root / "warmup"), "--workspace", str(root / "ws"),
              "--max-evals", "2", "--quiet", "--no-mlflow"])  # start Prefect's server outside the timing
        window.count, window.skip, window.last = 0, args.skip, args.evals
        sim.reset(seed=args.seed)
        base = root / "base.yaml"
        base.write_text(args.base_config)
        bases = BasesMade()
        bases.install()
        cpu0, wall0 = _cpu_self(), time.monotonic()
        code = main(["run", "circle_packing", "--run-dir", str(root / "run"), "--workspace", str(root / "ws"),
                     "--config", str(base), "--llm-base-url", sim.base_url,
                     "--max-evals", str(args.evals), "--mode", "async",
                     "--workers", f"research={args.slots},engineer={args.engineers}",
                     "--seed", str(args.seed), "--quiet", *([] if args.mlflow else ["--no-mlflow"])])
        cpu1, wall1 = _cpu_self(), time.monotonic()
    if args.cprofile:
        main_profile.dump_stats(str(args.cprofile))
    status = json.loads((root / "run" / "status.json").read_text())
    n = window.closed_count - window.skip
    stamps = window.stamps
    row: dict[str, Any] = {
        "exit": code, "seed": args.seed, "evaluations": status["evaluations"],
        "candidates_per_min": status["candidates_per_min"], "run_wall_s": status["wall_s"],
        "window_candidates": n,
        "cpu_ms_per_candidate": 1000 * (stamps["close"] - stamps["open"]) / n,
        "window_candidates_per_min": 60 * n / (stamps["close_wall"] - stamps["open_wall"]),
        "startup_cpu_s": stamps["open"] - cpu0,  # includes the first `skip` candidates
        "closing_cpu_s": cpu1 - stamps["close"],
        "total_cpu_ms_per_candidate": 1000 * (cpu1 - cpu0) / max(status["evaluations"], 1),
        "sink_backlog_at_last": window.backlog, "process_wall_s": wall1 - wall0,
        "mlflow": args.mlflow, "profiled": args.profile,
        "cognition_memos": bases.memo_counts(),  # the learn stage's and the write-back's (whole run)
        "cpu_ms_per_candidate_by_thread": dict(sorted(
            ((name, round(1000 * (cpu - window.threads_open.get(name, 0.0)) / n, 1))
             for name, cpu in window.threads_close.items()), key=lambda kv: -kv[1])),
    }
    if args.profile:
        rows, top, threads = breakdown(n)
        row["profile_total_ms_per_candidate"] = threads
        row["components_ms_per_candidate"] = dict(rows)
        row["top_self_ms_per_candidate"] = dict(top)
        row["self_ms_per_candidate_by_package"] = {k: round(1000 * v / n, 2)
                                                    for k, v in list(by_package().items())[:30]}
        if args.save_stats:
            import yappi

            yappi.get_func_stats().save(str(args.save_stats), type="pstat")
    return row


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--median", type=float, default=0.3)
    parser.add_argument("--sigma", type=float, default=0.6)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--engineers", type=int, default=2)
    parser.add_argument("--evals", type=int, default=200)
    parser.add_argument("--skip", type=int, default=20, help="candidates finished before the window opens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-mlflow", dest="mlflow", action="store_false")
    parser.add_argument("--profile", action="store_true", help="yappi (CPU clock, all threads) in the window")
    parser.add_argument("--cprofile", type=Path, default=None,
                        help="cProfile the event loop's thread (CPU clock) in the window; pstats here")
    parser.add_argument("--save-stats", type=Path, default=None, help="with --profile: pstats file")
    parser.add_argument("--base-config", default="{}")
    parser.add_argument("--out", type=Path, default=None, help="write the row as JSON here")
    args = parser.parse_args()
    row = run(args)
    text = json.dumps(row, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)
    print(f"orchestrator CPU: {row['cpu_ms_per_candidate']:.1f} ms/candidate "
          f"(candidates {args.skip}..{args.evals}), start-up {row['startup_cpu_s']:.1f} s, "
          f"{row['candidates_per_min']:.1f} cand/min", file=sys.stderr)


if __name__ == "__main__":
    main_bench()
