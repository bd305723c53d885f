"""The run files sink: each node's folder (`nodes/<id>/`: program, diff, prompt, answer, analysis,
result.json; a files task's files under `files/`), `best/program.py` (`best/files/`),
`research_plan.md`, and the snapshots a person or `evoforge status` reads while the run goes on
(status.json, leaderboard.md and .json, timeline.jsonl).

Every file is written whole through a rename (readers never see half a file). On resume,
`rebuild` writes the folder of every node the database holds and the disk lacks (a killed
session's last proposals).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from evoforge.infra.artifacts import ArtifactKind
from evoforge.infra.artifacts.program import Program
from evoforge.infra.nodes import Node
from evoforge.infra.runfiles import RunPaths, write_atomic
from evoforge.infra.timeline import Timeline
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.research_data import ResearchData
from evoforge.stages.rounds.plan_data import node_branch
from evoforge.stages.sinks.base import Event, EventKind, Sink

_NODE_EVENTS = (EventKind.PROPOSED, EventKind.RELEASED, EventKind.FINISHED, EventKind.CHANGED)
_RESULT_FIELDS = ("status", "error", "failed_stage", "reason", "score_pilot", "score_full", "params",
                  "metrics", "parent_id", "backend", "model", "tokens_in",
                  "tokens_out", "llm_s", "eval_s", "pool_version")


class RunFiles(Sink):
    """Writes the run folder's files from events."""

    name = "files"
    interval_s = 0.5

    def __init__(self, paths: RunPaths, timeline: Timeline | None = None,
                 artifact: ArtifactKind | None = None) -> None:
        self.paths, self.timeline = paths, timeline
        self.artifact = artifact or Program()
        self._appended: set[int] = set()  # snapshots on the timeline from a batch given again (by id())

    def record(self, events: Sequence[Event]) -> None:
        nodes: dict[str, tuple[Node, Event]] = {}
        best: Node | None = None
        for event in events:
            if event.kind in _NODE_EVENTS and event.node is not None:
                nodes[event.node.id] = (event.node, event)
                if event.prompt or event.answer:
                    self._write_exchange(event.node.id, event.prompt, event.answer)
            if event.best is not None:
                best = event.best
            if event.kind == EventKind.PLAN:
                write_atomic(self.paths.research_plan, event.payload[1])
            elif event.kind == EventKind.SNAPSHOT and id(event) not in self._appended:
                self._write_snapshot(event.payload)
                self._appended.add(id(event))
        for node, _ in nodes.values():
            write_node_files(self.paths, node, self.artifact)
        if best is not None:
            for name, text in self.artifact.stored(best.code).items():
                write_atomic(self.paths.best_dir / name, text)
        self._appended.clear()  # the whole batch is written

    def rebuild(self, nodes: Sequence[Node]) -> None:
        for node in nodes:
            if not (self.paths.node_dir(node.id) / "result.json").is_file():
                write_node_files(self.paths, node, self.artifact)

    def _write_exchange(self, node_id: str, prompt: Sequence[Mapping[str, str]], answer: str) -> None:
        """The research prompt and answer, once (a repair's or a reflection's do not replace them)."""
        folder = self.paths.node_dir(node_id)
        folder.mkdir(parents=True, exist_ok=True)
        if prompt and not (folder / "prompt.md").exists():
            text = "\n\n".join(f"## {m['role']}\n\n{m['content']}" for m in prompt)
            write_atomic(folder / "prompt.md", text)
        if answer and not (folder / "answer.md").exists():
            write_atomic(folder / "answer.md", answer)

    def _write_snapshot(self, snapshot: Mapping[str, Any]) -> None:
        write_atomic(self.paths.status, json.dumps(snapshot["status"], indent=2, default=str) + "\n")
        write_atomic(self.paths.leaderboard, snapshot["leaderboard_md"])
        # a row per line: still easy to read, and json's C encoder (indent= takes the Python one)
        write_atomic(self.paths.leaderboard_json,
                     "[\n" + ",\n".join(json.dumps(row, default=str) for row in snapshot["leaderboard"])
                     + "\n]\n")
        if self.timeline is not None:
            self.timeline.append(snapshot["status"], t=snapshot["status"]["updated_at"])


def write_node_files(paths: RunPaths, node: Node, artifact: ArtifactKind | None = None) -> None:
    """A node's folder: its program (files), diff, analysis and result.json, as the node has them."""
    folder = paths.node_dir(node.id)
    folder.mkdir(parents=True, exist_ok=True)
    if node.code:
        for name, text in (artifact or Program()).stored(node.code).items():
            write_atomic(folder / name, text)
    if node.diff:
        write_atomic(folder / "diff.patch", node.diff)
    report = AnalysisData.peek(node).report
    if report:
        write_atomic(folder / "analysis.md", report)
    summary = {k: getattr(node, k) for k in _RESULT_FIELDS}
    summary["branch"] = node_branch(node)
    summary["hardcoded"] = EngineerData.peek(node).hardcoded
    summary["prompt_dropped"] = ResearchData.peek(node).prompt_dropped
    write_atomic(folder / "result.json", json.dumps(summary, indent=2, default=str))  # last: all there
