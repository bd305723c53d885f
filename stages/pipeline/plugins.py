"""Plug-in files and modules (`engine.plugins`, `--plugin`): how one is imported, and the stages
it defines made into instances. `stages/plugins` sorts everything else a plug-in defines (sinks,
samplers, artifact kinds, algorithms) into its registry."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from evoforge.infra.plugin_files import load_file
from evoforge.infra.plugin_registry import defined_classes
from evoforge.stages.pipeline.stage import Stage


class PluginError(ValueError):
    """A plug-in that cannot be loaded (one line naming it)."""


def load_plugins(specs: Sequence[str]) -> list[Stage]:
    """One instance of every concrete `Stage` subclass each plug-in defines, in the order given."""
    stages: list[Stage] = []
    for spec in specs:
        stages += make_stages(spec, defined_classes(import_plugin(spec), Stage))
    return stages


def make_stages(spec: str, classes: Sequence[type[Stage]]) -> list[Stage]:
    """One instance of each stage class plug-in `spec` defines; PluginError when one needs arguments."""
    stages = []
    for cls in classes:
        try:
            stages.append(cls())
        except TypeError as exc:
            raise PluginError(f"plug-in {spec}: {cls.__name__}() cannot be made without arguments "
                              f"({exc})") from None
    return stages


def import_plugin(spec: str) -> ModuleType:
    """The module a plug-in spec names: a `.py` file (loaded once per process) or a module name."""
    path = Path(spec)
    try:
        if spec.endswith(".py"):
            if not path.is_file():
                raise PluginError(f"plug-in {spec}: no such file")
            return load_file(path)  # (kept with its text: Dask workers get the same module)
        return importlib.import_module(spec)
    except PluginError:
        raise
    except Exception as exc:  # the plug-in's own error, named in one line (its traceback: run.log)
        raise PluginError(f"plug-in {spec}: cannot load it ({type(exc).__name__}: {exc})") from exc
