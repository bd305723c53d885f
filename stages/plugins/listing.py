"""The rows of `evoforge plugins`: every registered plug-in, of the five kinds, with its origin."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evoforge.stages.plugins.registry import KINDS_OF_PLUGIN, use_plugins
from evoforge.stages.plugins.run_sinks import plugs_in_alone


def plugin_rows(specs: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One row per plug-in (kind, name, origin, about), built-ins first, with the files `specs`
    registered too (the files a user wants to check)."""
    use_plugins(specs)
    rows = []
    for kind in KINDS_OF_PLUGIN:
        for name in kind.registry:
            cls = kind.registry[name]
            rows.append({"kind": kind.name, "name": name, "origin": kind.registry.origin(name),
                         "about": _about(kind.name, cls)})
    return rows


def _about(kind: str, cls: type) -> str:
    """One line on the class: its `about`, else its docstring's first line."""
    about = getattr(cls, "about", None) or (cls.__doc__ or "").strip().split("\n")[0]
    if kind == "sink" and not plugs_in_alone(cls):
        about = f"(made by its stage) {about}"
    return about
