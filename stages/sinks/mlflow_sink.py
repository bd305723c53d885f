"""The MLflow sink: every finished candidate a nested run under the run's parent run (its Optuna
trials nested under it, its LLM calls as traces linked to it), every plan and promotion, the
held-out final scores and, at the end, the run's accounting, leaderboard, report and best
program on the parent run.

It records on its own thread, a batch of events at a time; the traces of a batch are written in
one transaction. On resume it first makes MLflow say what the node database says (one run per
candidate with an outcome: runs a killed session left RUNNING are marked KILLED, runs without
an outcome behind them removed, missing ones logged).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evoforge.infra.artifacts import ArtifactKind
from evoforge.infra.nodes import Node
from evoforge.infra.runfiles import RunPaths
from evoforge.infra.tracking import ChildRun, Tracker, sqlite_file
from evoforge.stages.rounds.promotion import PromotionSummary, promotion_md
from evoforge.stages.sinks.base import Event, EventKind, Sink
from evoforge.stages.sinks.mlflow_runs import PROMOTION, candidate_run, promotion_runs, trial_runs
from evoforge.stages.tuning.param_space import SpaceError, parse_space
from evoforge.stages.tuning.param_study import StudyResult, trials_json

PARAM_SEARCH = "param_search"  # the stage whose study (Item.owned) becomes nested trial runs


def study_of(event: Event) -> StudyResult | None:
    """The Optuna study param search handed on with the candidate, if any."""
    study = event.owned.get(PARAM_SEARCH)
    return study if isinstance(study, StudyResult) else None


def trials_text(node: Node, study: StudyResult | None) -> str | None:
    """param_trials.json's text for the node's study (None without one)."""
    if study is None:
        return None
    try:
        space = parse_space(node.code)
    except SpaceError:
        return None
    return trials_json(study, node.id, space)


class MlflowRecords(Sink):
    """Writes the run's MLflow records through `tracker` (opened: its parent run exists)."""

    name = "mlflow"
    interval_s = 1.0

    def __init__(self, tracker: Tracker, level: str, paths: RunPaths,
                 artifact: ArtifactKind | None = None) -> None:
        self.tracker, self.level, self.paths, self.artifact = tracker, level, paths, artifact
        self.candidates = 0
        # events of a batch that failed part-way which were written before it failed (by id(): the
        # hub holds them until they are given again), so that the retry writes each once
        self._written: set[int] = set()
        self._store = sqlite_file(tracker.uri)

    def record(self, events: Sequence[Event]) -> None:
        if self._gone():
            raise self._removed()
        try:
            self._record(events)
        except Exception as exc:
            if self._gone():  # removed while this batch was written: say so, not sqlite's words for it
                raise self._removed() from exc
            raise

    def _gone(self) -> bool:
        return self._store is not None and not self._store.is_file()

    def _removed(self) -> FileNotFoundError:
        return FileNotFoundError(f"the MLflow store {self._store} was removed during the run; "
                                 f"its records wait here until it is back")

    def _record(self, events: Sequence[Event]) -> None:
        runs: list[tuple[ChildRun, list[ChildRun], Sequence[Any]]] = []
        group: list[Event] = []  # the events behind `runs`
        best: tuple[dict[str, float], int] | None = None
        for event in events:
            node = event.node
            if id(event) in self._written:
                continue
            if event.kind == EventKind.FINISHED and node is not None and node.status.terminal:
                study = study_of(event)
                children = trial_runs(node, study, self.level) if study is not None else []
                run = candidate_run(node, self.level, trials_text(node, study), self.artifact)
                runs.append((run, children, event.llm_calls))
                group.append(event)
                score = node.score(self.level)
                if event.new_best and score is not None:
                    best = ({f"best_score_{self.level}": score, "evaluations": float(event.evaluations)},
                            event.evaluations)
            elif event.kind in (EventKind.PLAN, EventKind.PROMOTION, EventKind.FINAL, EventKind.PARENT,
                                EventKind.CLOSE):
                self._flush(runs, group)  # in order: candidates before what comes after them
                runs, group = [], []
                self._run_level(event)
                self._written.add(id(event))
        self._flush(runs, group)
        if best is not None:
            self.tracker.log_parent(metrics=best[0], step=best[1])
        self._written.clear()  # the whole batch is written

    def _flush(self, runs: list[tuple[ChildRun, list[ChildRun], Sequence[Any]]], group: list[Event]) -> None:
        if runs:
            self.tracker.log_runs(runs)  # all or nothing (one transaction)
            self.candidates += len(runs)
            self._written.update(id(e) for e in group)

    def _run_level(self, event: Event) -> None:
        if event.kind == EventKind.PLAN:
            plan, text, calls = event.payload
            self.tracker.log_text_on_parent(text, "research_plan.md")
            self.tracker.log_text_on_parent(text, f"plans/research_plan_v{plan.version}.md")
            if calls:
                self.tracker.log_parent_traces(calls, {"plan_version": str(plan.version)})
        elif event.kind == EventKind.PROMOTION:
            summary, promoted = event.payload
            self._promotion(summary, promoted, event.best)
        elif event.kind == EventKind.FINAL:
            _, summary = event.payload
            if summary:
                self.tracker.log_parent(metrics=summary)
        elif event.kind == EventKind.PARENT:
            self.tracker.log_parent(**event.payload)
        elif event.kind == EventKind.CLOSE:
            self._close(event.payload)

    def _promotion(self, summary: PromotionSummary, promoted: Mapping[str, Node],
                   winner: Node | None) -> None:
        metrics: dict[str, float] = {"promoted": len(summary.results)}
        if summary.spearman is not None:
            metrics["spearman_pilot_full"] = summary.spearman
        for r in summary.results:
            metrics[f"pilot.{r.node_id}"] = r.pilot
            if r.full is not None:
                metrics[f"full.{r.node_id}"] = r.full
        if winner is not None and winner.score_full is not None:
            metrics["winner_full"] = winner.score_full
        run = ChildRun(f"promotion-{summary.round}",
                       {"round": summary.round, "promoted": ",".join(summary.promoted),
                        "noisy": ",".join(summary.noisy) or "-"},
                       metrics, {"kind": PROMOTION, "level": "full", "round": str(summary.round)},
                       texts={"promotion.md": promotion_md(summary, dict(promoted))})
        self.tracker.log_runs([(run, promotion_runs(summary.results, dict(promoted), summary.round), ())])

    def _close(self, payload: Mapping[str, Any]) -> None:
        """The run's outcome on its parent run: accounting, texts, files; then the run ends."""
        if payload.get("metrics"):
            self.tracker.log_parent(metrics=payload["metrics"], step=payload.get("step", 0))
        for name, text in payload.get("texts", {}).items():
            self.tracker.log_text_on_parent(text, name)
        for path, folder in payload.get("files", ()):
            if Path(path).exists():
                self.tracker.log_file_on_parent(Path(path), folder)
        self.tracker.terminate(payload.get("status", "FINISHED"))

    def rebuild(self, nodes: Sequence[Node]) -> None:
        expected = {}
        for node in nodes:
            if node.status.terminal:
                trials = self.paths.param_trials(node.id)
                expected[node.id] = candidate_run(node, self.level,
                                                  trials.read_text() if trials.is_file() else None,
                                                  self.artifact)
        self.tracker.reconcile(expected)
