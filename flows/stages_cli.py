"""`evoforge stages`: the pipeline a run would use — its stages in order, which ones the config
leaves out, workers (and adaptive ceilings), where each stage's results go, which run on the
seed, the data each keeps on a node and the sinks it brings."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any


def add_stages_parser(sub: Any) -> None:
    stages = sub.add_parser("stages", help="list a run's pipeline: stages, order, workers, routes")
    stages.add_argument("--config", type=Path, help="YAML config file (as for evoforge run)")
    stages.add_argument("--workers", help="e.g. research=8,engineer=2,analyze=4 (as for evoforge run)")
    stages.add_argument("--plugin", action="append", metavar="FILE", help="a plug-in file (repeatable)")
    stages.add_argument("--algorithm", help="the algorithm: a name (evoforge algorithms) or a .py file")
    stages.add_argument("--json", action="store_true", help="the rows as JSON")


def stage_rows(cfg: Any) -> list[dict[str, Any]]:
    """One row per stage of the run's pipeline, main line first, then the side stages."""
    from evoforge.flows.prepare import build_pipeline, with_algorithm_defaults

    cfg = with_algorithm_defaults(cfg)
    pipeline = build_pipeline(cfg)
    enabled = {s.name for s in pipeline.stages if s.enabled(cfg)}
    routes = pipeline.routes(enabled)
    rows = []
    for order, stage in enumerate(pipeline.stages, 1):
        bounds = stage.workers(cfg)
        moves = [bounds.low, bounds.high] if cfg.adaptive.enabled else [bounds.initial] * 2
        rows.append({
            "order": order, "stage": stage.name, "line": "main" if stage in pipeline.line else "side",
            "enabled": stage.name in enabled, "workers": bounds.initial,
            "workers_range": moves, "then": routes.get(stage.name),
            "entry": stage.name == pipeline.entry(enabled).name, "evaluates": stage.evaluates,
            "checkpoint": stage.checkpoint, "runs_on_seed": stage.runs_on_seed,
            "task_run": stage.task_run_name if cfg.engine.task_runs == "stages" else None,
            "data": ([f"{stage.data.owner}.{f.name}" for f in fields(stage.data)]  # type: ignore[arg-type]
                     if stage.data is not None else []),
            "own_sinks": _brings_sinks(stage),
        })
    return rows


def _brings_sinks(stage: Any) -> bool:
    from evoforge.stages.pipeline.stage import Stage

    return type(stage).sinks is not Stage.sinks


def render(rows: list[dict[str, Any]]) -> str:
    """The rows as a table."""
    head = f"{'#':>2}  {'stage':<14}{'line':<6}{'on':<5}{'workers':<11}{'then':<14}notes"
    lines = [head]
    for r in rows:
        low, high = r["workers_range"]
        moves = low != r["workers"] or high != r["workers"]
        workers = f"{r['workers']}" + (f" ({low}-{high})" if moves else "")
        notes = [n for n, on in (("entry", r["entry"]), ("evaluates", r["evaluates"]),
                                  ("checkpoint", r["checkpoint"]), ("runs on seed", r["runs_on_seed"]),
                                  ("brings its own sinks", r["own_sinks"])) if on]
        if r["task_run"]:
            notes.append(f"task run {r['task_run']}")
        if r["data"]:
            notes.append("data " + ", ".join(r["data"]))
        lines.append(f"{r['order']:>2}  {r['stage']:<14}{r['line']:<6}{'yes' if r['enabled'] else 'off':<5}"
                     f"{workers:<11}{(r['then'] or '-'):<14}{'; '.join(notes)}")
    return "\n".join(lines)


def run_stages(ns: argparse.Namespace) -> int:
    from evoforge.flows.cli import _parse_workers
    from evoforge.infra.config import ConfigError
    from evoforge.infra.config_load import load_config

    overrides: dict[str, Any] = {"engine.plugins": ns.plugin, "engine.algorithm": ns.algorithm}
    if ns.workers:
        try:
            workers = _parse_workers(ns.workers)
        except argparse.ArgumentTypeError as exc:
            raise ConfigError(f"--workers: {exc}") from None
        overrides.update({f"engine.workers.{name}": n for name, n in workers.items()})
    origins = {key: "--workers" for key in overrides if key.startswith("engine.workers.")}
    cfg = load_config(ns.config, overrides, origins={**origins, "engine.plugins": "--plugin",
                                                     "engine.algorithm": "--algorithm"})
    rows = stage_rows(cfg)
    print(json.dumps(rows, indent=2) if ns.json else render(rows))
    if not ns.json:
        print("off: the config leaves the stage out; then: where its results go (commit: the head)",
              file=sys.stderr)
    return 0
