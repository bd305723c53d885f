"""A candidate as MLflow shows it: the tags its runs are filtered by, and its nested runs (one per
Optuna trial, one per promotion of it)."""

from __future__ import annotations

from evoforge.infra.artifacts import ArtifactKind
from evoforge.infra.artifacts.program import Program
from evoforge.infra.nodes import EVALUATED, SELECTION_LEVELS, Node
from evoforge.infra.tracking import ChildRun
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.population.repeat_data import RepeatData
from evoforge.stages.research_data import ResearchData
from evoforge.stages.rounds.plan_data import node_branch
from evoforge.stages.rounds.promotion import Promoted
from evoforge.stages.tuning.param_study import StudyResult, TuningData

CANDIDATE, TRIAL, PROMOTION = "candidate", "trial", "promotion"  # the `kind` tag of a run


def run_tags(node: Node, level: str, kind: str = CANDIDATE) -> dict[str, str]:
    """Tags of a run about `node` (its own, a trial's, a promotion's), so the UI filters by them,
    e.g. `tags.origin = 'novel' and tags.status = 'evaluated'`; `level` is the evaluation level."""
    return {"kind": kind, "node_id": node.id, "level": level, "status": str(node.status),
            "origin": node.origin, "island": str(node.island), "branch": node_branch(node) or "",
            "backend": node.backend, "failed_stage": node.failed_stage or "", "reason": node.reason or ""}


def candidate_run(node: Node, level: str, trials: str | None = None,
                  artifact: ArtifactKind | None = None) -> ChildRun:
    """The candidate's own run `node-<id>` under the parent run: its params (lineage, model,
    knobs), metrics (scores per level, costs), text artifacts and tags; `level` is the search
    level, `trials` the study's trials as JSON (param_trials.json)."""
    metrics: dict[str, float] = {k: v for k, v in node.metrics.items() if isinstance(v, (int, float))}
    metrics.update(eval_s=node.eval_s, llm_s=node.llm_s, tokens_in=node.tokens_in,
                   tokens_out=node.tokens_out)
    for scored in SELECTION_LEVELS:
        if node.score(scored) is not None:
            metrics[f"score_{scored}"] = node.score(scored)  # type: ignore[assignment]
    params = {"node_id": node.id, "parent": node.parent_id or "", "island": node.island,
              "model": node.model, "backend": node.backend, "origin": node.origin,
              "generation": node.generation, "pool_version": node.pool_version,
              "branch": node_branch(node) or "", "search_level": level,
              **{f"knob.{k}": v for k, v in node.params.items()}}
    engineered = EngineerData.peek(node)
    if engineered.score_default is not None:
        metrics[f"score_{level}_defaults"] = engineered.score_default
    tuning = TuningData.peek(node)
    if tuning.trials_run:
        metrics["trials"] = tuning.trials_run
        metrics.update({f"saturation_{k}": v for k, v in tuning.saturation.items() if v is not None})
    if engineered.hardcoded:
        params["hardcoded"] = "; ".join(engineered.hardcoded)
    dropped = ResearchData.peek(node).prompt_dropped
    if dropped:  # the prompt parts left out to fit the context window
        params["prompt_dropped"] = "; ".join(dropped)
    # diff.txt: MLflow's UI previews a .txt, not a .patch; a proposal whose answer was unusable has
    # no artifact (no code, no packed files): recorded without one
    files = (artifact or Program()).stored(node.code) if node.code else {}
    texts = {**files, "diff.txt": node.diff,
             "motivation.md": node.motivation, "error.txt": node.error or "",
             "analysis.md": AnalysisData.peek(node).report, "param_trials.json": trials or ""}
    tags = run_tags(node, level)
    repeat_of = RepeatData.peek(node).repeat_of
    if repeat_of:  # served an earlier evaluation's result: no evaluation, no score here
        tags["repeat_of"] = repeat_of
    return ChildRun(f"node-{node.id}", params, metrics, tags,
                    "FINISHED" if node.status == EVALUATED else "FAILED", texts)


def trial_runs(node: Node, study: StudyResult, level: str) -> list[ChildRun]:
    """The study's trials as child runs `trial-<node>-<k>`: knob values, score, cost, source; the
    `status` tag is the trial's Optuna state (complete, fail, pruned)."""
    runs = []
    for t in study.trials:
        metrics = {"seconds": t.seconds}
        if t.value is not None:
            metrics[f"score_{level}"] = t.value
        if t.cpu_s is not None:
            metrics["cpu_s"] = t.cpu_s
        tags = {**run_tags(node, level, TRIAL), "status": t.state.lower(), "trial": str(t.number),
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
