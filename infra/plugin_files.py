"""Plug-in `.py` files as modules: loaded once per process under a name made from the file's
path, their source kept so that another process (a Dask worker, which has neither the file nor
its module) can load the same module under the same name before it unpickles anything whose
class the file defines (an artifact kind's, say). Example::

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "shapes.py"
    >>> _ = path.write_text("class Square:\\n    side = 2\\n")
    >>> module = load_file(path)
    >>> module.__name__.startswith("evoforge_plugin_shapes_"), loaded()[module.__name__].path == str(path)
    (True, True)
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

PREFIX = "evoforge_plugin_"


@dataclass(frozen=True)
class PluginSource:
    """A loaded plug-in file: its module name, where it was read from and its text."""

    name: str
    path: str
    text: str


_loaded: dict[str, PluginSource] = {}  # by module name, in the order they were loaded
_lock = threading.Lock()


def module_name(path: Path) -> str:
    """The module name of the plug-in file at `path` (its stem and a hash of its full path)."""
    return f"{PREFIX}{path.stem}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"


def load_file(path: Path) -> ModuleType:
    """The module of the plug-in file at `path`, executed on first use (its errors raised)."""
    name = module_name(path)
    if name in sys.modules:
        return sys.modules[name]
    source = PluginSource(name, str(path), path.read_text())
    module = _execute(source)
    with _lock:
        _loaded[name] = source
    return module


def loaded() -> dict[str, PluginSource]:
    """The plug-in files loaded in this process, by module name."""
    with _lock:
        return dict(_loaded)


def install(sources: list[PluginSource]) -> list[ModuleType]:
    """Load `sources` here under their own module names (one already loaded is kept); their modules."""
    return [sys.modules[s.name] if s.name in sys.modules else _execute(s) for s in sources]


def _execute(source: PluginSource) -> ModuleType:
    spec = importlib.util.spec_from_loader(source.name, loader=None, origin=source.path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = source.path
    sys.modules[source.name] = module  # (a dataclass in the file looks its module up while it runs)
    try:
        exec(compile(source.text, source.path, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[source.name]
        raise
    return module
