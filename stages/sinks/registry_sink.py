"""The registry sink: a finished run's winner where MLflow users keep results, in MLflow's registries.

At the close of a run that finished (not an interrupted or failed one: its resumed session
registers), the winner becomes a version in the workspace's MLflow (infra/mlflow_registry.py):
a text or playbook task's best prompt or playbook a version of the prompt named after the task
in the Prompt Registry, an ML task's winning program (one defining ``build_model``, whose
evaluator defines ``training_data``) a pyfunc model version in the Model Registry
(evaluators/pyfunc_program.py). The alias ``evoforge-best`` moves to the version only when it
beats the aliased one. The sink then adds a line naming the alias's URI to report.md, and its
gauges (status.json ``sinks.mlflow_registry``) say what was registered. Other kinds register
nothing. Like every sink, a failure is counted and logged (status.json ``tracking_failures``),
never stopping the run; registering twice changes nothing.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evoforge.evaluators.task import Task
from evoforge.infra.mlflow_registry import (
    Registered,
    Winner,
    register_model,
    register_prompt,
    registry_client,
    registry_name,
)
from evoforge.infra.nodes import Node
from evoforge.infra.runfiles import RunPaths, write_atomic
from evoforge.stages.sinks.base import Event, EventKind, Sink

log = logging.getLogger("evoforge.sinks")

REPORT_HEADING = "## In MLflow's registry"


@dataclass(frozen=True)
class RegistryTarget:
    """Where and as what the run registers: the tracking store, the parent run's name and id."""

    tracking_uri: str
    run_name: str
    run_id: str


class RegistryRecords(Sink):
    """Registers the winner of a finished run at its close."""

    name = "mlflow_registry"
    interval_s = 1.0

    def __init__(self, target: RegistryTarget, task: Task, paths: RunPaths) -> None:
        self.target, self.task, self.paths = target, task, paths
        self.registered: Registered | None = None

    def record(self, events: Sequence[Event]) -> None:
        for event in events:
            if event.kind != EventKind.CLOSE or event.payload.get("status") != "FINISHED":
                continue
            winner = event.payload.get("winner")
            if isinstance(winner, Node):
                self.register(winner, str(event.payload.get("winner_level") or self.task.search_level))

    def register(self, node: Node, level: str) -> Registered | None:
        """Register `node` (scored at `level`) and note it in report.md; None when the task's kind
        has nothing to register or the node has no score."""
        score = node.score(level)
        if score is None:
            log.warning("registry: the winner %s has no %s score; nothing registered", node.id, level)
            return None
        winner = Winner(self.target.run_name, self.target.run_id, node.id, score, level,
                        self.task.direction == "maximize")
        name = registry_name(self.task.name)
        if self.task.uses_task_model:
            client = registry_client(self.target.tracking_uri)
            registered = register_prompt(client, name, node.code, winner)
        else:
            from evoforge.evaluators.pyfunc_program import save_program_model, wraps_as_model

            if not wraps_as_model(self.task, node.code):
                return None
            client = registry_client(self.target.tracking_uri)
            with tempfile.TemporaryDirectory(prefix="evoforge-model-") as folder:
                model = save_program_model(Path(folder), self.task, node.code, dict(node.params))
                registered = register_model(client, name, model, winner)
        self.registered = registered
        log.info("registry: %s", registered.line())
        self._note(registered)
        return registered

    def _note(self, registered: Registered) -> None:
        """The line naming the registered version, at the end of report.md (once)."""
        report = self.paths.report
        if not report.is_file():
            return
        text = report.read_text(encoding="utf-8")
        what = "prompt" if registered.scheme == "prompts" else "model"
        line = f"The best {what}: {registered.line()}."
        if line not in text:
            write_atomic(report, f"{text.rstrip()}\n\n{REPORT_HEADING}\n\n{line}\n")

    def gauges(self) -> dict[str, Any]:
        found = self.registered
        if found is None:
            return {"registered": None}
        return {"registered": found.uri, "version": found.version, "alias_version": found.alias_version,
                "line": found.line()}
