"""Stage plug-ins from outside the package: a `.py` file or an importable module name
(`engine.plugins`, `--plugin`), each contributing the `Stage` subclasses it defines."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from evoforge.stages.pipeline.stage import Stage


class PluginError(ValueError):
    """A plug-in that cannot be loaded (one line naming it)."""


def load_plugins(specs: Sequence[str]) -> list[Stage]:
    """One instance of every concrete `Stage` subclass each plug-in defines, in the order given."""
    stages: list[Stage] = []
    for spec in specs:
        module = import_plugin(spec)
        found = [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                 if issubclass(cls, Stage) and cls.__module__ == module.__name__
                 and not inspect.isabstract(cls)]
        if not found:
            raise PluginError(f"plug-in {spec}: defines no Stage subclass")
        for cls in sorted(found, key=lambda c: inspect.getsourcelines(c)[1]):
            try:
                stages.append(cls())
            except TypeError as exc:
                raise PluginError(f"plug-in {spec}: {cls.__name__}() cannot be made without arguments "
                                  f"({exc})") from None
    return stages


def import_plugin(spec: str) -> ModuleType:
    path = Path(spec)
    try:
        if spec.endswith(".py"):
            if not path.is_file():
                raise PluginError(f"plug-in {spec}: no such file")
            name = f"evoforge_plugin_{path.stem}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
            if name in sys.modules:
                return sys.modules[name]
            loader = importlib.util.spec_from_file_location(name, path)
            assert loader is not None and loader.loader is not None
            module = importlib.util.module_from_spec(loader)
            sys.modules[name] = module
            try:
                loader.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
            return module
        return importlib.import_module(spec)
    except PluginError:
        raise
    except Exception as exc:  # the plug-in's own error, named in one line (its traceback: run.log)
        raise PluginError(f"plug-in {spec}: cannot load it ({type(exc).__name__}: {exc})") from exc
