"""Param search (ml-evolve: "Optuna chooses the numbers"): an Optuna TPE study of each new
structure's declared knobs, on the task's search level.

The stage plug-in runs behind the engineer (and its repairs). The engineer evaluated the
structure with its declared defaults; this stage records that as the study's first trial and
runs `param_search.trials` more (TPE, `n_startup_trials = param_search.startup`, seeded,
`constant_liar` when `param_search.parallel > 1`), each a sandboxed evaluation on the run's
evaluation runner, so they share the evaluation slots with the engineer and show as Prefect
task runs `trial-<node>-<k>`. The study lives in `<run>/optuna.db`: a resumed run continues it
and re-runs nothing finished. The node comes back with the best trial's score and parameters,
the trial count and the saturation telemetry; the study itself travels on the item to the
commit, which writes `param_trials/<node>.json` and one nested MLflow run per trial.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evoforge.infra.config import RunConfig
from evoforge.infra.nodes import EVALUATED, Node
from evoforge.infra.runfiles import RunPaths, write_atomic
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.pipeline.requests import request_for
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.pipeline.stage import Stage, StageResult
from evoforge.stages.population.item import Item, ItemUpdate
from evoforge.stages.sinks.base import Event, EventKind, Sink
from evoforge.stages.tuning.param_space import SpaceError, parse_space
from evoforge.stages.tuning.param_study import (
    INTERRUPTED,
    SOURCE_DEFAULT,
    StudyResult,
    StudySettings,
    TrialOutcome,
    TuningData,
    run_study,
    stored_result,
    study_name_of,
    trials_json,
)

TRIAL_RUN = "trial-{node}-{k}"  # the Prefect task run of one trial


class ParamSearch(Stage):
    """Tunes each evaluated structure's knobs with Optuna (`param_search.enabled`)."""

    name = "param_search"
    runs_on_seed = True  # the initial program's knobs are tuned before the search starts
    data = TuningData
    workers_like = "engineer"  # studies at once; their trials wait for the evaluation slots

    def enabled(self, cfg: RunConfig) -> bool:
        return cfg.param_search.enabled

    def sinks(self, ctx: RunView) -> Sequence[Sink]:
        assert ctx.paths is not None and ctx.optuna_url is not None
        return [TrialFiles(ctx.paths, ctx.optuna_url, ctx.task.direction)]

    def skips(self, item: Item, ctx: RunView) -> bool:
        node = item.node
        if node is None or node.status != EVALUATED or node.score(ctx.task.search_level) is None:
            return True
        try:
            return not parse_space(node.code)
        except SpaceError:
            return True

    async def run(self, item: Item, ctx: RunView) -> StageResult:
        return await param_search(item, ctx)


class TrialFiles(Sink):
    """param_search's own sink: `param_trials/<node>.json`, every trial of a structure's study
    (its space, each trial's knob values, score, cost and source, the best, the saturation)."""

    name = "param_trials"
    interval_s = 1.0

    def __init__(self, paths: RunPaths, optuna_url: str, direction: str) -> None:
        self.paths, self.optuna_url, self.direction = paths, optuna_url, direction

    def record(self, events: Sequence[Event]) -> None:
        for event in events:
            study = event.owned.get(ParamSearch.name)
            if event.kind == EventKind.FINISHED and event.node is not None and isinstance(study, StudyResult):
                self._write(event.node, study)

    def rebuild(self, nodes: Sequence[Node]) -> None:
        """The trials files of tuned nodes that a killed session did not write, from the studies."""
        for node in nodes:
            if TuningData.peek(node).trials_run and not self.paths.param_trials(node.id).is_file():
                try:
                    space = parse_space(node.code)
                except SpaceError:
                    continue
                study = stored_result(self.optuna_url, study_name_of(node.id), space, self.direction)
                if study is not None:
                    self._write(node, study)

    def _write(self, node: Node, study: StudyResult) -> None:
        write_atomic(self.paths.param_trials(node.id), trials_json(study, node.id, parse_space(node.code)))


def settings_for(cfg: RunConfig, direction: str, node_id: str) -> StudySettings:
    """The study settings of one node: seeded by the run's seed and the node."""
    seed = (cfg.seed * 1_000_003 + int(node_id[:8], 16)) % 2**31 if _hex(node_id) else cfg.seed
    p = cfg.param_search
    return StudySettings(trials=p.trials, startup=p.startup, parallel=p.parallel, seed=seed,
                         direction=direction)


def _hex(text: str) -> bool:
    try:
        int(text[:8], 16)
    except ValueError:
        return False
    return True


async def param_search(item: Item, ctx: RunView) -> StageResult:
    """Run (or continue) the node's study; its copy comes back with the best trial's numbers."""
    assert item.node is not None and ctx.optuna_url is not None
    node = item.node.copy()
    level = ctx.task.search_level
    space = parse_space(node.code)
    spent = {"seconds": 0.0, "cpu_s": 0.0}

    async def evaluate(k: int, params: dict[str, Any]) -> TrialOutcome:
        request = request_for(node, ctx, params)
        request = request.with_name(TRIAL_RUN.format(node=node.id, k=k))
        report = await ctx.evaluations.run(request, None)
        outcome = report.outcome
        spent["seconds"] += outcome.seconds
        spent["cpu_s"] += outcome.cpu_s or 0.0
        return TrialOutcome(outcome.score if outcome.ok else None, outcome.error,
                            outcome.seconds, outcome.cpu_s)

    default = TrialOutcome(EngineerData.peek(node).score_default, None, node.eval_s, node.eval_cpu_s or None)
    result = await run_study(space, settings_for(ctx.config, ctx.task.direction, node.id),
                             ctx.optuna_url, study_name_of(node.id), evaluate, default)
    node.eval_s += spent["seconds"]
    node.eval_cpu_s += spent["cpu_s"]
    tuning = TuningData.of(node)
    tuning.trials_run = sum(1 for t in result.trials
                            if t.source != SOURCE_DEFAULT and t.error != INTERRUPTED)
    tuning.saturation = dict(result.saturation)
    if result.best_value is not None:
        setattr(node, f"score_{level}", result.best_value)
        node.params = dict(result.best_params)
    return StageResult(node, updates=ItemUpdate(owned={ParamSearch.name: result}))

