"""MLflow writes: CPU per evolution candidate for its run (per call vs in bulk) and its 2 LLM traces.

Every measurement uses a fresh sqlite store in a temp dir (an experiment and a parent run made
first, warm-up candidates not counted) and reports the median over ``--repeats`` stores of this
process's CPU (getrusage user+sys; sys shown apart: mostly the kernel creating files and sqlite
journal files, which depends a lot on the filesystem, see ``--tmp-dir``) per candidate, and the
wall time.

runs (candidates: a 3 KB program + 5 more text artifacts, 12 metrics, 15 params, 10 tags)
  per-call     what evoforge's tracker did before infra/mlflow_bulk.py:
               MlflowClient.create_run(tags={parentRunId, ...}), log_batch(metrics, params), the
               texts staged in a temp dir and uploaded with one log_artifacts, set_terminated
               (plus where its CPU goes, step by step)
  bulk N       evoforge.infra.mlflow_bulk.write_runs, one transaction per N candidates, texts
               written straight into each run's artifact folder (N = 1, 5, 20, 50); also
               without the texts

traces (2 per candidate, each one root span as evoforge's infra/llm_traces.trace_spans makes
them, 5 trace tags)
  exporter-style  what MLflow's own exporter does per trace: log_spans([span]) +
                  start_trace(info); link_traces_to_run per candidate
  per-cand        log_spans(2 spans) + link_traces_to_run(2 ids)
  batch N         log_spans(2N spans) in one call (+ a link call per candidate, or the links
                  written by the bulk run transaction: RunRecord.trace_ids)

The candidate data, the span builder and the per-call writer defined here are also what
tests/mlflow_compare.py compares with (tests/test_mlflow_bulk.py: bulk runs read the same as
per-call ones).

Prints a markdown table and writes the results as JSON to ``--out`` (bench/out/, git-ignored).

    python bench/mlflow_bulk.py [--candidates 200] [--repeats 3] [--tmp-dir /dev/shm] [--skip-traces]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param, Span, SpanType, TraceInfo, TraceLocation, TraceState
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.tracing.client import TracingClient
from mlflow.tracing.constant import SpanAttributeKey, TraceTagKey
from mlflow.tracing.utils import encode_span_id, generate_mlflow_trace_id_from_otel_trace_id
from mlflow.tracking import MlflowClient

from evoforge.infra.mlflow_bulk import RunRecord, write_runs

DEFAULT_OUT = Path(__file__).resolve().parent / "out"
BATCH_SIZES = (1, 5, 20, 50)


# ---- candidate data ------------------------------------------------------------------------------

def _text(rng: random.Random, size: int, line: str) -> str:
    out, n = [], 0
    while n < size:
        s = f"{line} {rng.randrange(10**6)} = {rng.random():.6f}\n"
        out.append(s)
        n += len(s)
    return "".join(out)[:size]


def make_candidate(i: int, rng: random.Random, failed: bool = False) -> dict[str, Any]:
    """Candidate ``i``: 15 params, 12 metrics, 10 tags, 6 text artifacts (a 3 KB program)."""
    params = {f"param_{k}": rng.choice([rng.random(), rng.randrange(1000), "adam", True])
              for k in range(13)}
    params["prompt_template"] = "x" * 400
    params["island"] = i % 4
    metrics = {f"metric_{k}": rng.random() * 100 for k in range(11)}
    metrics["combined_score"] = rng.random()
    tags = {"node_id": f"n{i:05d}", "generation": str(i // 10), "island": str(i % 4),
            "parent_node": f"n{max(i - 1, 0):05d}", "stage": "evaluate", "author": "llm",
            "model": "gpt-x", "operator": "diff", "task": "circle_packing", "seed": "42"}
    texts = {
        "program.py": _text(rng, 3000, "    value"),
        "diff.txt": _text(rng, 1200, "+ line"),
        "motivation.md": _text(rng, 600, "Because"),
        "error.txt": _text(rng, 300, "Traceback") if failed else "no error\n",
        "analysis.md": _text(rng, 1500, "- finding"),
        "param_trials.json": json.dumps([{"trial": t, "value": rng.random()} for t in range(20)]),
    }
    return {"name": f"cand-{i:05d}", "params": params, "metrics": metrics, "tags": tags,
            "texts": texts, "status": "FAILED" if failed else "FINISHED"}


def make_candidates(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` candidates (every 7th, from the 4th on, FAILED), reproducible from ``seed``."""
    rng = random.Random(seed)
    return [make_candidate(i, rng, failed=(i % 7 == 3)) for i in range(n)]


def record_of(cand: dict[str, Any], parent: str, with_texts: bool = True,
              trace_ids: list[str] | None = None) -> RunRecord:
    """``cand`` as a RunRecord nested under ``parent``."""
    return RunRecord(name=cand["name"], parent_run_id=parent, params=cand["params"],
                     metrics=cand["metrics"], tags=cand["tags"], status=cand["status"],
                     texts=cand["texts"] if with_texts else {}, trace_ids=trace_ids or [])


# ---- the per-call writer (with optional CPU laps) ------------------------------------------------

def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def per_call_write(client: MlflowClient, uri: str, exp_id: str, parent: str, cand: dict[str, Any],
                   laps: dict[str, float] | None = None) -> str:
    """Write ``cand`` the per-call way; add each step's CPU seconds to ``laps`` if given."""
    t = _cpu() if laps is not None else 0.0

    def lap(step: str) -> None:
        nonlocal t
        if laps is not None:
            now = _cpu()
            laps[step] = laps.get(step, 0.0) + now - t
            t = now

    run = client.create_run(exp_id, run_name=cand["name"],
                            tags={"mlflow.parentRunId": parent, **cand["tags"]})
    rid = run.info.run_id
    lap("create_run")
    now = int(time.time() * 1000)
    client.log_batch(
        rid,
        metrics=[Metric(k, float(v), now, 0) for k, v in cand["metrics"].items()],
        params=[Param(k, str(v)[:6000]) for k, v in cand["params"].items()],
        tags=[],
    )
    lap("log_batch")
    with tempfile.TemporaryDirectory(prefix="evoforge-artifacts-") as folder:
        for name, text in cand["texts"].items():
            if text:
                Path(folder, name).write_text(text, encoding="utf-8")
        get_artifact_repository(run.info.artifact_uri, tracking_uri=uri).log_artifacts(folder)
    lap("artifacts")
    client.set_terminated(rid, status=cand["status"])
    lap("set_terminated")
    return rid


# ---- traces --------------------------------------------------------------------------------------

def make_spans(i: int, node_id: str, n_tags: int = 5) -> list[Span]:
    """2 traces (one root span each) as evoforge's infra/llm_traces.trace_spans makes them,
    with the first ``n_tags`` of its 5 trace tags (the trace name first)."""
    spans = []
    for stage in ("research", "analyze"):
        trace_id = generate_mlflow_trace_id_from_otel_trace_id(uuid.uuid4().int)
        start_ns = int((time.time() - 5) * 1e9)
        name = f"{stage} (LLM)"
        messages = [{"role": "system", "content": "You evolve programs. " * 40},
                    {"role": "user", "content": ("def f(x):\n    return x\n" * 120)[:3000]}]
        answer = "Here is the improved program:\n" + "    y = x * 2\n" * 150
        tags = {TraceTagKey.TRACE_NAME: name, "purpose": stage, "author": "llm",
                "model": "gpt-x", "node_id": node_id}
        tags = dict(list(tags.items())[:n_tags])
        attributes = {
            SpanAttributeKey.REQUEST_ID: trace_id,
            SpanAttributeKey.SPAN_TYPE: SpanType.CHAT_MODEL,
            SpanAttributeKey.INPUTS: {"messages": messages},
            SpanAttributeKey.OUTPUTS: {"model": "gpt-x", "choices": [{"index": 0, "message": {
                "role": "assistant", "content": answer}}],
                "usage": {"prompt_tokens": 900, "completion_tokens": 600}},
            SpanAttributeKey.CHAT_USAGE: {"input_tokens": 900, "output_tokens": 600,
                                          "total_tokens": 1500},
            SpanAttributeKey.MODEL: "gpt-x",
            "evoforge.stage": stage, "evoforge.backend": "openai", "evoforge.author": "llm",
            "evoforge.answered_by": "LLM", "evoforge.attempts": 1, "evoforge.seconds": 4.2,
            **{f"{SpanAttributeKey.TRACE_TAG_PREFIX}{k}": v for k, v in tags.items()},
        }
        spans.append(Span.from_dict({
            "trace_id": trace_id, "span_id": encode_span_id(uuid.uuid4().int >> 64),
            "parent_span_id": None, "name": name, "start_time_unix_nano": start_ns,
            "end_time_unix_nano": start_ns + 4_200_000_000, "events": [], "links": [],
            "status": {"code": "STATUS_CODE_OK", "message": ""},
            "attributes": {k: json.dumps(v) for k, v in attributes.items()},
        }))
    return spans


def trace_info_of(span: Span, exp_id: str) -> TraceInfo:
    """The TraceInfo MLflow's exporter passes to start_trace for a one-span trace."""
    return TraceInfo(
        trace_id=span.trace_id, trace_location=TraceLocation.from_experiment_id(exp_id),
        request_time=span.start_time_ns // 1_000_000, state=TraceState.OK,
        execution_duration=(span.end_time_ns - span.start_time_ns) // 1_000_000,
        request_preview=None, response_preview=None,
        trace_metadata={}, tags={TraceTagKey.TRACE_NAME: span.name},
    )


# ---- harness ------------------------------------------------------------------------------------

class Store:
    """A fresh sqlite tracking store in a temp dir with an experiment and a parent run.

    Attributes: ``dir`` (the temp dir: ``mlflow.db`` and ``mlartifacts``; removed by
    :meth:`close`), ``uri``, ``client`` (an ``MlflowClient``), ``exp_id`` (artifact location
    ``<dir>/mlartifacts``), ``parent`` (the run candidates nest under), ``tracing`` (a
    ``TracingClient``).
    """

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="mlflow-bench-")
        root = Path(self.dir.name)
        self.uri = f"sqlite:///{root / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=self.uri)
        (root / "mlartifacts").mkdir()
        self.exp_id = self.client.create_experiment(
            "evoforge/bench", artifact_location=(root / "mlartifacts").as_uri())
        self.parent = self.client.create_run(self.exp_id, run_name="parent").info.run_id
        self.tracing = TracingClient(self.uri)

    @property
    def artifact_root(self) -> Path:
        """The experiment's artifact folder (one subfolder per run with artifacts)."""
        return Path(self.dir.name, "mlartifacts")

    def close(self) -> None:
        self.dir.cleanup()


def _rusage() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def cpu_wall(fn: Callable[[], object]) -> tuple[float, float, float]:
    """CPU seconds (user+sys of this process), of which sys, and wall seconds ``fn`` took."""
    (u0, s0), w0 = _rusage(), time.perf_counter()
    fn()
    (u1, s1), w1 = _rusage(), time.perf_counter()
    return (u1 - u0) + (s1 - s0), s1 - s0, w1 - w0


def chunks(items: list, n: int) -> list[list]:
    return [items[i:i + n] for i in range(0, len(items), n)]


Result = tuple[str, float, float, float]  # label, CPU ms/cand (user+sys), of which sys, wall


def measure(label: str, n_cands: int, repeats: int,
            trial: Callable[[], tuple[Store, Callable[[], object]]]) -> Result:
    """Median over ``repeats`` fresh stores of the per-candidate cost of ``trial``'s job."""
    cpu, sys_, wall = [], [], []
    for _ in range(repeats):
        store, job = trial()
        try:
            c, k, w = cpu_wall(job)
        finally:
            store.close()
        cpu.append(c / n_cands * 1000)
        sys_.append(k / n_cands * 1000)
        wall.append(w / n_cands * 1000)
    out = (label, statistics.median(cpu), statistics.median(sys_), statistics.median(wall))
    print(f"  {label:46s} cpu {out[1]:6.2f} (sys {out[2]:5.2f})  wall {out[3]:6.2f} ms/cand",
          flush=True)
    return out


# ---- the benchmarks -----------------------------------------------------------------------------

def bench_runs(n_cands: int, repeats: int) -> list[Result]:
    """Per-call vs bulk at each batch size, with and without the text artifacts."""
    cands = make_candidates(n_cands)
    warm = make_candidates(10, seed=1)

    def per_call(s: Store, cs: list) -> None:
        for c in cs:
            per_call_write(s.client, s.uri, s.exp_id, s.parent, c)

    def bulk(n: int, with_texts: bool = True) -> Callable[[Store, list], None]:
        def job(s: Store, cs: list) -> None:
            for b in chunks(cs, n):
                write_runs(s.uri, s.exp_id, [record_of(c, s.parent, with_texts) for c in b])
        return job

    configs = [("per-call (evoforge before bulk)", per_call)]
    configs += [(f"bulk N={n}", bulk(n)) for n in BATCH_SIZES]
    configs += [(f"bulk N={n}, no text files (DB only)", bulk(n, False)) for n in BATCH_SIZES]
    results = []
    for label, fn in configs:
        def trial(fn=fn):
            store = Store()
            fn(store, warm)
            return store, lambda: fn(store, cands)
        results.append(measure(label, n_cands, repeats, trial))
    return results


def per_call_breakdown(n_cands: int) -> dict[str, float]:
    """Where the per-call path's CPU goes (ms per candidate, user+sys)."""
    store = Store()
    try:
        for c in make_candidates(5, seed=1):
            per_call_write(store.client, store.uri, store.exp_id, store.parent, c)
        laps: dict[str, float] = {}
        for cand in make_candidates(n_cands):
            per_call_write(store.client, store.uri, store.exp_id, store.parent, cand, laps)
    finally:
        store.close()
    return {k: round(v / n_cands * 1000, 2) for k, v in laps.items()}


def bench_traces(n_cands: int, repeats: int) -> list[Result]:
    """CPU per candidate (2 traces) for writing its traces and linking them to its run."""

    def exporter(store: Store, rids, spans):
        for rid, sp in zip(rids, spans, strict=True):
            for span in sp:
                store.tracing.log_spans(store.exp_id, [span])
                store.tracing.start_trace(trace_info_of(span, store.exp_id))
            store.client.link_traces_to_run([s.trace_id for s in sp], rid)

    def per_cand(store: Store, rids, spans):
        for rid, sp in zip(rids, spans, strict=True):
            store.tracing.log_spans(store.exp_id, sp)
            store.client.link_traces_to_run([s.trace_id for s in sp], rid)

    def batched(n: int, link: bool):
        def job(store: Store, rids, spans):
            for b in chunks(list(zip(rids, spans, strict=True)), n):
                store.tracing.log_spans(store.exp_id, [s for _, sp in b for s in sp])
                if link:
                    for rid, sp in b:
                        store.client.link_traces_to_run([s.trace_id for s in sp], rid)
        return job

    configs = [("exporter-style: log_spans+start_trace per trace, link/cand", exporter, 5),
               ("per-cand: log_spans(2)+link (evoforge, queue dry)", per_cand, 5)]
    configs += [(f"batch N={n}: log_spans(2N) + link/cand", batched(n, True), 5) for n in (5, 50)]
    configs += [(f"batch N={n}: log_spans(2N), links in run txn", batched(n, False), 5)
                for n in BATCH_SIZES]
    configs += [("batch N=50: log_spans(2N), trace name tag only", batched(50, False), 1)]
    results = []
    for label, fn, n_tags in configs:
        def trial(fn=fn, n_tags=n_tags):
            store = Store()
            cands = make_candidates(n_cands + 6, seed=2)
            rids = [store.client.create_run(store.exp_id, run_name=c["name"]).info.run_id
                    for c in cands]
            spans = [make_spans(i, c["tags"]["node_id"], n_tags) for i, c in enumerate(cands)]
            fn(store, rids[:6], spans[:6])  # warm-up
            return store, lambda: fn(store, rids[6:], spans[6:])
        results.append(measure(label, n_cands, repeats, trial))

    # the links inside the bulk run transaction (RunRecord.trace_ids): N=20 with vs without
    for with_links in (False, True):
        def trial(with_links=with_links):
            store = Store()
            recs = [record_of(c, store.parent, with_texts=False,
                              trace_ids=[uuid.uuid4().hex, uuid.uuid4().hex] if with_links
                              else None) for c in make_candidates(n_cands, seed=3)]
            write_runs(store.uri, store.exp_id, [record_of(c, store.parent) for c in
                                                 make_candidates(5, seed=4)])  # warm-up
            return store, lambda: [write_runs(store.uri, store.exp_id, b) for b in chunks(recs, 20)]
        label = "bulk N=20 runs, DB only, " + ("+2 trace links/cand" if with_links else "no links")
        results.append(measure(label, n_cands, repeats, trial))

    c, k, w = cpu_wall(lambda: [make_spans(i, "n") for i in range(n_cands)])
    results.append(("(building the 2 Span objects; not a write)", c / n_cands * 1000,
                    k / n_cands * 1000, w / n_cands * 1000))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", type=int, default=200, help="candidates per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="fresh stores per measurement (median)")
    ap.add_argument("--tmp-dir", help="where the temp stores go (default: the system temp dir)")
    ap.add_argument("--skip-traces", action="store_true", help="measure the runs only")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of the results JSON")
    args = ap.parse_args()
    if args.tmp_dir:
        tempfile.tempdir = args.tmp_dir
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

    started = time.time()
    print(f"mlflow {mlflow.__version__}, python {platform.python_version()}, {args.candidates} "
          f"candidates, median of {args.repeats}, stores in {tempfile.gettempdir()}")
    breakdown = per_call_breakdown(args.candidates)
    print("per-call CPU breakdown (ms/cand):", breakdown)
    print("runs:")
    results = bench_runs(args.candidates, args.repeats)
    if not args.skip_traces:
        print("traces (2 per candidate):")
        results += bench_traces(args.candidates, args.repeats)
    print("\n| path | CPU ms/cand | of which sys | wall ms/cand |\n|---|---:|---:|---:|")
    for label, cpu, sys_, wall in results:
        print(f"| {label} | {cpu:.2f} | {sys_:.2f} | {wall:.2f} |")

    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"mlflow_bulk_{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}.json"
    out.write_text(json.dumps({
        "mlflow": mlflow.__version__, "python": platform.python_version(),
        "candidates": args.candidates, "repeats": args.repeats, "tmp_dir": tempfile.gettempdir(),
        "started": started, "seconds": round(time.time() - started, 1),
        "per_call_breakdown_ms": breakdown,
        "results": [{"path": label, "cpu_ms": round(cpu, 3), "sys_ms": round(sys_, 3),
                     "wall_ms": round(wall, 3)} for label, cpu, sys_, wall in results],
    }, indent=1) + "\n")
    print(f"\nJSON: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
