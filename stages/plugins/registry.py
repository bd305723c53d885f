"""The one plug-in mechanism: stages, sinks, samplers, artifact kinds and algorithms, each a class
found in a `.py` file (`--plugin`) or in a module an installed package advertises (entry points,
group `evoforge.plugins`; evoforge's own built-ins are advertised the same way, see pyproject.toml).

Every concrete subclass of the five bases a plug-in module defines is registered, sorted by its
base class into that kind's registry; the registries of samplers, artifact kinds and algorithms
live below (stages/sample, infra/artifacts, stages/algorithms), which read their own entry points
(`sampler.*`, `kind.*`, `algorithm.*`) and take the rest from here. Two classes under one name is
one error line naming both origins. `evoforge plugins` lists them all (`plugin_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evoforge.infra.artifacts import KINDS, ArtifactKind
from evoforge.infra.plugin_registry import (
    Registry,
    RegistryError,
    defined_classes,
    entry_point_origin,
    load_entry_point,
    plugin_entry_points,
)
from evoforge.stages.algorithms import ALGORITHMS, Algorithm
from evoforge.stages.pipeline.plugins import PluginError, import_plugin, make_stages
from evoforge.stages.pipeline.stage import Stage
from evoforge.stages.sample.base import SAMPLERS, ParentSampler
from evoforge.stages.sinks.base import Sink

__all__ = ["KINDS_OF_PLUGIN", "SINKS", "STAGES", "PluginError", "PluginKind", "use_plugins"]

STAGES: Registry[Stage] = Registry("stage", Stage, prefix="stage")
SINKS: Registry[Sink] = Registry("sink", Sink, prefix="sink")


@dataclass(frozen=True)
class PluginKind:
    """One of the five kinds of plug-in: its name, its base class and its registry."""

    name: str
    base: type
    registry: Registry


KINDS_OF_PLUGIN = (PluginKind("stage", Stage, STAGES), PluginKind("sink", Sink, SINKS),
                   PluginKind("sampler", ParentSampler, SAMPLERS),
                   PluginKind("artifact kind", ArtifactKind, KINDS),
                   PluginKind("algorithm", Algorithm, ALGORITHMS))
_installed: list[bool] = []  # set once every entry point's module was registered in this process


def use_plugins(specs: Sequence[str]) -> list[Stage]:
    """Register every installed plug-in and the run's own (`specs`: `.py` files, module names, or
    the name of an installed stage), replacing the last run's files; the stages the specs add to
    the run's pipeline, one instance each. PluginError: one line naming the plug-in."""
    try:
        _register_installed()
        found: dict[str, list[tuple[type, str]]] = {kind.name: [] for kind in KINDS_OF_PLUGIN}
        stages: list[Stage] = []
        for spec in dict.fromkeys(specs):
            if not spec.endswith(".py") and spec in STAGES:  # an installed stage, by name
                stages += make_stages(spec, [STAGES[spec]])
                continue
            module = import_plugin(spec)
            origin = str(Path(spec).resolve()) if spec.endswith(".py") else module.__name__
            classes = {kind.name: defined_classes(module, kind.base) for kind in KINDS_OF_PLUGIN}
            if not any(classes.values()):
                raise PluginError(f"plug-in {spec}: defines no stage, sink, sampler, artifact kind or "
                                  f"algorithm (a subclass of Stage, Sink, ParentSampler, ArtifactKind "
                                  f"or Algorithm)")
            for kind in KINDS_OF_PLUGIN:
                found[kind.name] += [(cls, origin) for cls in classes[kind.name]]
            stages += make_stages(spec, classes["stage"])
        for kind in KINDS_OF_PLUGIN:
            kind.registry.use_files(found[kind.name])
    except RegistryError as exc:
        raise PluginError(str(exc)) from None
    return stages


def _register_installed() -> None:
    """Every class of every module advertised in group `evoforge.plugins`, once per process."""
    if _installed:
        return
    for ep in plugin_entry_points():
        module = load_entry_point(ep)
        for kind in KINDS_OF_PLUGIN:
            for cls in defined_classes(module, kind.base):
                kind.registry.add(cls, entry_point_origin(ep))
    _installed.append(True)
