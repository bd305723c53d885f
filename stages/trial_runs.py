"""One nested MLflow run per Optuna trial, under its candidate's run."""

from __future__ import annotations

from evoforge.infra.tracking import ChildRun
from evoforge.stages.param_study import StudyResult


def trial_runs(node_id: str, study: StudyResult, stage: str) -> list[ChildRun]:
    """The study's trials as child runs `trial-<node>-<k>`: knob values, score, cost, source."""
    runs = []
    for t in study.trials:
        metrics = {"seconds": t.seconds}
        if t.value is not None:
            metrics[f"score_{stage}"] = t.value
        if t.cpu_s is not None:
            metrics["cpu_s"] = t.cpu_s
        runs.append(ChildRun(f"trial-{node_id}-{t.number}", {f"knob.{k}": v for k, v in t.params.items()},
                             metrics, {"state": t.state, "source": t.source, "error": (t.error or "")[:500]},
                             "FINISHED" if t.state == "COMPLETE" else "FAILED"))
    return runs
