"""A head over a real run state and real sinks (node database, run files), without an engine:
for tests of what applying results does to the pool, the counters and the records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evoforge.evaluators.task import Task, load_task
from evoforge.flows.head import Head
from evoforge.flows.run_state import RunState
from evoforge.infra.config import RunConfig
from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.sinks.hub import SinkHub
from evoforge.stages.sinks.node_db import NodeDatabase
from evoforge.stages.sinks.run_files import RunFiles


@dataclass
class HeadRig:
    """A head, its state, and the sinks recording what it says."""

    head: Head
    hub: SinkHub
    store: NodeStore
    paths: RunPaths

    @property
    def state(self) -> RunState:
        return self.head.state

    def recorded(self) -> dict[str, Node]:
        """The node database's nodes by id, once the sinks have caught up."""
        assert self.hub.sync(30)
        return {n.id: n for n in self.store.all()}

    def close(self) -> None:
        self.hub.close()


def make_head(tmp_path: Path, nodes: list[Node] = (), cfg: RunConfig | None = None,
              task: Task | None = None, level: str | None = None) -> HeadRig:
    """A head over `nodes` (rebuilt as a resumed run would be) for `task` (default circle_packing);
    `level` overrides the task's search level (a gated pool ranks by `pilot`)."""
    cfg = cfg or RunConfig()
    task = task or load_task("circle_packing")
    if level is not None and level != task.search_level:
        from dataclasses import replace

        from evoforge.evaluators.task_yaml import EvalLevel

        task = replace(task, levels=(EvalLevel("pilot", 0.1), EvalLevel("full", None)))
    paths = RunPaths(tmp_path)
    store = NodeStore(paths.db)
    if nodes:
        store.write(list(nodes), {})
    state = RunState.rebuild(list(nodes), {}, task, cfg)
    hub = SinkHub([NodeDatabase(store), RunFiles(paths)])
    hub.start()
    return HeadRig(Head(state, hub, cfg.staleness.policy), hub, store, paths)
