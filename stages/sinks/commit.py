"""The commit stage: the single writer of the node database, the run files and MLflow.

Stages return results; the commit applies them: it is the only code that changes the pool, the
sampler, the counters and the stores. Rows are buffered and written in one transaction (group
commit) when `_FLUSH_ROWS` are pending or the oldest has waited `flush_interval_s`; a failed
write keeps them buffered, so the final flush of a stopping run tries them again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evoforge.cognition.entries import CognitionItem
from evoforge.cognition.store import CognitionBase
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.llm_traces import LLMCall
from evoforge.infra.nodes import EVALUATED, ROLLED_BACK, SPECULATIVE, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.runfiles import RunPaths, write_atomic
from evoforge.infra.tracking import Tracker
from evoforge.stages.population.case_order import CaseOrder
from evoforge.stages.population.history import NEW_BEST, ROLLBACK, SPECULATIVE_BEST, PoolHistory
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.speculation import confirmed
from evoforge.stages.population.stats import RunStats
from evoforge.stages.reports.leaderboard import leaderboard_md, leaderboard_rows
from evoforge.stages.reports.status import status_dict
from evoforge.stages.rounds.records import RoundRecords
from evoforge.stages.sample import ParentSampler
from evoforge.stages.sinks.mlflow_runs import candidate_run, trial_runs
from evoforge.stages.sinks.model_usage import ModelUsageTable
from evoforge.stages.tuning.param_space import parse_space
from evoforge.stages.tuning.param_study import StudyResult, trials_json

_FLUSH_ROWS = 32


@dataclass(frozen=True)
class SlowWrite:
    """A commit-side write to run off the event loop (`work`), then applied on it (`done`)."""

    work: Callable[[], Any]
    done: Callable[[Any], None]


class Committer:
    """Persists proposals and results, updates the pool, and keeps the snapshots fresh."""

    def __init__(self, store: NodeStore, paths: RunPaths, pool: Pool, sampler: ParentSampler,
                 stats: RunStats, task_name: str, tracker: Tracker | None = None,
                 wall_s_before: float = 0.0, history: PoolHistory | None = None,
                 case_order: CaseOrder | None = None, lineage: dict[str, str | None] | None = None,
                 flush_interval_s: float = 0.25, cognition: CognitionBase | None = None,
                 run_id: str = "", dedupe_similarity: float = 0.9, llm: LLMBackend | None = None,
                 models: ModelUsageTable | None = None):
        self.store, self.paths, self.pool, self.sampler = store, paths, pool, sampler
        self.llm = llm  # told how each candidate did (a router learns which model pays off)
        self.models = models if models is not None else ModelUsageTable()  # per-model accounting
        self.stats, self.task_name, self.tracker = stats, task_name, tracker
        self.history = history if history is not None else PoolHistory()
        self.case_order = case_order
        self.lineage: dict[str, str | None] = lineage if lineage is not None else {}  # id -> parent
        self.wall_s_before = wall_s_before
        self.flush_interval_s = flush_interval_s
        self.started = time.monotonic()
        self._rows: dict[str, Node] = {}  # written at the next flush, in one transaction
        self._meta: dict[str, Any] = {}
        self._oldest: float | None = None  # when the oldest pending row was buffered
        self.busy_s = 0.0  # time spent writing: how long the single writer held the pool
        self.flushes = 0
        self.rows_written = 0
        self.cognition, self.run_id, self.dedupe_similarity = cognition, run_id, dedupe_similarity
        self.lessons_written = 0
        self.rounds = RoundRecords(self)  # plans and promotions: applied here too

    def pending(self) -> int:
        """Rows waiting for the next flush."""
        return len(self._rows) + len(self._meta)

    def flush_due(self, now: float | None = None) -> float | None:
        """Seconds until the buffer must be written (0: now), or None when it is empty."""
        if self._oldest is None:
            return None
        if len(self._rows) >= _FLUSH_ROWS:
            return 0.0
        now = time.monotonic() if now is None else now
        return max(0.0, self._oldest + self.flush_interval_s - now)

    def flush(self) -> None:
        """Write the buffered rows and meta in one transaction; they stay buffered if it fails."""
        if not self._rows and not self._meta:
            return
        t0 = time.perf_counter()
        rows, meta = list(self._rows.values()), dict(self._meta)
        self.store.write(rows, meta)
        for row in rows:  # a row buffered again while writing (same object) is written either way
            self._rows.pop(row.id, None)
        for key in meta:
            self._meta.pop(key, None)
        self._oldest = None if not self._rows and not self._meta else time.monotonic()
        self.flushes += 1
        self.rows_written += len(rows)
        self.busy_s += time.perf_counter() - t0

    def _put(self, node: Node) -> None:
        self._rows[node.id] = node
        self.lineage[node.id] = node.parent_id
        if self._oldest is None:
            self._oldest = time.monotonic()

    def _put_meta(self, key: str, value: Any) -> None:
        self._meta[key] = value
        if self._oldest is None:
            self._oldest = time.monotonic()

    def nodes_now(self) -> list[Node]:
        """Every node of the run as of now (what is buffered written first): for round jobs."""
        self.flush()
        return self.store.all()

    def wall_s(self) -> float:
        """Wall seconds of the run over all its sessions."""
        return self.wall_s_before + time.monotonic() - self.started

    def record_proposal(self, item: Item) -> None:
        """Persist a proposed candidate before it is evaluated, so a restart re-queues it."""
        t0 = time.perf_counter()
        assert item.node is not None
        self._put(item.node)
        self._write_node_files(item)
        self.busy_s += time.perf_counter() - t0

    def record_speculative(self, item: Item, snapshot: Node) -> bool:
        """Put a node into the pool on its validation-prefix score; returns True on a new best.

        `snapshot` is the engineer's copy of the node at release time; it becomes the pool's
        member, and the final result is folded into that same object when it arrives."""
        t0 = time.perf_counter()
        if item.status is None or item.status.terminal:  # the full result got here first: void
            if item.node is not None:
                item.node.speculative_at = None
            return False
        assert snapshot.status == SPECULATIVE
        item.node = snapshot
        node = snapshot
        self._put(node)
        new_best = self.pool.add(node)
        self.sampler.on_node_added(node, self.pool)
        if new_best:
            self._bumped(SPECULATIVE_BEST, node)
        self.stats.speculative_released += 1
        self.busy_s += time.perf_counter() - t0
        return new_best

    def record_result(self, item: Item) -> str | None:
        """Persist a finished item; returns "new_best", "rolled_back" or None."""
        t0 = time.perf_counter()
        node = item.node
        assert node is not None
        event = None
        pooled = self.pool.get(node.id)
        reference = self.pool.best_confirmed()
        if reference is not None and reference.id == node.id:
            reference = None
        if pooled is not None and pooled.status == SPECULATIVE:  # fold the result into the member
            vars(pooled).update(vars(node))
            item.node = node = pooled
            event = self._settle_speculation(item)
        elif node.status == EVALUATED:
            seed_value = self.pool.value(node)
            if node.origin == "seed" and not self.pool.nodes and seed_value is not None:
                self.pool.judge_scale = abs(seed_value) or 1.0  # fixed before any node ranks
            if self.pool.add(node):
                event = NEW_BEST
                self._bumped(NEW_BEST, node)
            self.sampler.on_node_added(node, self.pool)
        if self.case_order is not None and node.case_scores:
            self.case_order.update(node.case_scores, reference.case_scores if reference else {},
                                   self.pool.maximize)
            self._put_meta("case_order", self.case_order.state())
        self._put(node)
        self.stats.count(node)
        gain = self.models.add(node, self.pool.get(node.parent_id), self.pool)
        if self.llm is not None and node.origin != "seed":
            self.llm.observe(node.model, gain)
        self._write_node_files(item)
        trials = None
        if item.study is not None:
            trials = trials_json(item.study, node.id, parse_space(node.code))
            write_atomic(self.paths.param_trials(node.id), trials)
        self._track(node, event == NEW_BEST, item.study, trials, item.llm_calls)
        self.busy_s += time.perf_counter() - t0
        return event

    def _settle_speculation(self, item: Item) -> str | None:
        """Confirm a released node (it stays, as the best) or roll it back out of the pool."""
        node = item.node
        assert node is not None
        if node.status == EVALUATED and confirmed(node, self.pool):
            self.stats.confirmed += 1
            new_best = self.pool.rescore(node)
            self.sampler.on_node_rescored(node, self.pool)
            if new_best:
                self._bumped(NEW_BEST, node)
                return NEW_BEST
            write_atomic(self.paths.best_program, node.code)
            return None
        node.reflection = (node.reflection + "; " if node.reflection else "") + (
            f"speculation rolled back (prefix {node.score_partial}, full {node.score_full})")
        node.status = ROLLED_BACK
        was_best = self.pool.remove(node)
        self.sampler.on_node_removed(node, self.pool)
        if was_best:
            self._bumped(ROLLBACK, node)
        return ROLLBACK

    def _bumped(self, kind: str, node: Node) -> None:
        """The pool version moved: remember why, and refresh the best program on disk."""
        self.history.record(self.pool.v, kind, node)
        self._put_meta("pool_version", self.pool.v)
        best = self.pool.best if self.pool.level == "full" else self.pool.winner()
        if best is not None:
            write_atomic(self.paths.best_program, best.code)

    def slow_writes(self, item: Item) -> SlowWrite | None:
        """Writes of a finished item too slow for the event loop (lessons into the cognition base,
        an embedding each), or None; the engine runs `work` on a thread, then `done` here."""
        node = item.node
        if self.cognition is None or node is None or not node.lessons:
            return None
        base = self.cognition
        provenance = f"analyzer insight of node {node.id} in run {self.run_id}"
        lessons = [CognitionItem.create(_title(lesson), lesson, source=f"run {self.run_id}",
                                        task=self.task_name, provenance=provenance, tags=["lesson"])
                   for lesson in node.lessons]

        def work() -> list[str]:  # new lessons only: deduplicated by embedding similarity
            vectors = base.embed(lessons)  # one embedder call for all of them
            added = [base.add_if_novel(lesson, self.dedupe_similarity, vector)
                     for lesson, vector in zip(lessons, vectors, strict=True)]
            return [lesson.id for lesson in added if lesson is not None]

        def done(ids: list[str]) -> None:
            if ids:
                node.artifacts["lessons_written"] = ",".join(ids)
                self.lessons_written += len(ids)
                self._put(node)

        return SlowWrite(work, done)

    def write_snapshot(self, extra: dict[str, Any]) -> dict[str, Any]:
        """Rewrite status.json, leaderboard.md and leaderboard.json; returns the status."""
        status = status_dict(self.stats, self.pool, self.wall_s(),
                             {"commit_busy_s": round(self.busy_s, 3),
                              "lessons_written": self.lessons_written, **extra})
        write_atomic(self.paths.status, json.dumps(status, indent=2) + "\n")
        write_atomic(self.paths.leaderboard, leaderboard_md(
            self.task_name, self.pool, plan=self.rounds.plan, history=self.history.updates,
            promotions=self.rounds.promotions))
        rows = leaderboard_rows(self.pool, top=100)
        # a row per line: still easy to read, and json's C encoder (indent= takes the Python one)
        write_atomic(self.paths.leaderboard_json,
                     "[\n" + ",\n".join(json.dumps(row, default=str) for row in rows) + "\n]\n")
        return status

    def _write_node_files(self, item: Item) -> None:
        node = item.node
        assert node is not None
        folder = self.paths.node_dir(node.id)
        folder.mkdir(parents=True, exist_ok=True)
        if node.code:
            (folder / "program.py").write_text(node.code)
        if node.diff:
            (folder / "diff.patch").write_text(node.diff)
        if item.prompt and not (folder / "prompt.md").exists():
            (folder / "prompt.md").write_text(
                "\n\n".join(f"## {m['role']}\n\n{m['content']}" for m in item.prompt)
            )
        if item.answer and not (folder / "answer.md").exists():
            (folder / "answer.md").write_text(item.answer)
        if node.analysis:
            (folder / "analysis.md").write_text(node.analysis)
        summary = {k: getattr(node, k) for k in (
            "status", "error", "failed_stage", "score_pilot", "score_full", "params", "branch",
            "hardcoded", "metrics", "parent_id", "backend",
            "model", "tokens_in", "tokens_out", "llm_s", "eval_s", "pool_version")}
        (folder / "result.json").write_text(json.dumps(summary, indent=2, default=str))

    def _track(self, node: Node, new_best: bool, study: StudyResult | None = None,
               trials: str | None = None, calls: list[LLMCall] | None = None) -> None:
        if self.tracker is None:
            return
        run = candidate_run(node, self.pool.level, trials)
        self.tracker.log_candidate(run.name, run.params, run.metrics, run.texts, tags=run.tags,
                                   status=run.status,
                                   children=trial_runs(node, study, self.pool.level) if study else None,
                                   traces=calls)
        best = self.pool.value(node)
        if new_best and best is not None:
            self.tracker.log_parent(metrics={f"best_score_{self.pool.level}": best,
                                             "evaluations": self.stats.evaluations},
                                    step=self.stats.evaluations)


def _title(lesson: str) -> str:
    """A short title for a lesson: its first words."""
    words = lesson.split()
    return " ".join(words[:8]) + ("…" if len(words) > 8 else "")
