"""Where things go in the engine: the design path (the stages from the entry up to the first that
evaluates), the stage a resumed proposal goes on to, and whether a full disk is the run folder's."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from evoforge.flows.stage_pool import StagePool
from evoforge.infra.disk_full import DiskFull, disk_full_error
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.pipeline.stage import COMMIT
from evoforge.stages.population.item import Item


def design_path(pools: Mapping[str, StagePool], routes: Mapping[str, str],
                entry: StagePool) -> list[StagePool]:
    """The pools from the entry up to (not including) the first stage that evaluates."""
    path: list[StagePool] = []
    name = entry.name
    while name != COMMIT and name in pools and not pools[name].stage.evaluates:
        if pools[name] in path:
            break
        path.append(pools[name])
        name = routes[name]
    return path or [entry]


def resume_stage(item: Item, pipeline: Pipeline, pools: Mapping[str, StagePool], downstream: str) -> str:
    """Where a resumed proposal goes: the stage it was on its way to when it was persisted, or
    where that stage would have sent it when this run leaves the stage out."""
    assert item.node is not None
    name = item.node.next_stage or downstream
    line = [s.name for s in pipeline.line]
    while name != COMMIT and name not in pools:
        if name not in line:
            return downstream
        rest = line[line.index(name) + 1:]
        name = next((n for n in rest if n in pools), COMMIT)
    return name


def run_folder_full(exc: BaseException, paths: RunPaths | None) -> bool:
    """True when `exc` is a full disk where the run writes (the run folder `paths.root`, or a store
    whose path the error does not say), not in a candidate's own directory elsewhere."""
    full = disk_full_error(exc)
    if full is None:
        return False
    path = DiskFull.of(full).path
    return path is None or paths is None or Path(path).resolve().is_relative_to(paths.root.resolve())
