"""A candidate as MLflow shows it: the tags its runs are filtered by, and its nested runs (one per
Optuna trial, one per promotion of it)."""

from __future__ import annotations

from evoforge.infra.nodes import Node
from evoforge.infra.tracking import ChildRun
from evoforge.stages.param_study import StudyResult
from evoforge.stages.promotion import Promoted

CANDIDATE, TRIAL, PROMOTION = "candidate", "trial", "promotion"  # the `kind` tag of a run


def run_tags(node: Node, stage: str, kind: str = CANDIDATE) -> dict[str, str]:
    """Tags of a run about `node` (its own, a trial's, a promotion's), so the UI filters by them,
    e.g. `tags.origin = 'novel' and tags.status = 'evaluated'`; `stage` is the evaluation stage."""
    return {"kind": kind, "node_id": node.id, "stage": stage, "status": str(node.status),
            "origin": node.origin, "island": str(node.island), "branch": node.branch or "",
            "backend": node.backend, "failed_stage": node.failed_stage or ""}


def trial_runs(node: Node, study: StudyResult, stage: str) -> list[ChildRun]:
    """The study's trials as child runs `trial-<node>-<k>`: knob values, score, cost, source; the
    `status` tag is the trial's Optuna state (complete, fail, pruned)."""
    runs = []
    for t in study.trials:
        metrics = {"seconds": t.seconds}
        if t.value is not None:
            metrics[f"score_{stage}"] = t.value
        if t.cpu_s is not None:
            metrics["cpu_s"] = t.cpu_s
        tags = {**run_tags(node, stage, TRIAL), "status": t.state.lower(), "trial": str(t.number),
                "source": t.source, "error": (t.error or "")[:500]}
        runs.append(ChildRun(f"trial-{node.id}-{t.number}", {f"knob.{k}": v for k, v in t.params.items()},
                             metrics, tags, "FINISHED" if t.state == "COMPLETE" else "FAILED"))
    return runs


def promotion_runs(results: tuple[Promoted, ...], nodes: dict[str, Node], round_: int) -> list[ChildRun]:
    """One child run `promoted-<node>` per candidate a promotion evaluated at `full`."""
    runs = []
    for r in results:
        node = nodes.get(r.node_id)
        tags = run_tags(node, "full", PROMOTION) if node is not None else {"kind": PROMOTION,
                                                                           "node_id": r.node_id}
        tags.update(round=str(round_), error=(r.error or "")[:500])
        metrics = {"score_pilot": r.pilot, "seconds": r.seconds, "cpu_s": r.cpu_s}
        if r.full is not None:
            metrics["score_full"] = r.full
        runs.append(ChildRun(f"promoted-{r.node_id}", {"node_id": r.node_id, "round": round_}, metrics,
                             tags, "FINISHED" if r.full is not None else "FAILED"))
    return runs
