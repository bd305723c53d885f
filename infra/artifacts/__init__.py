"""Artifact kinds: what a task evolves (`task.yaml`: `kind:`), one module each, registered as
plug-ins are (entry points named `kind.*` in group `evoforge.plugins`, evoforge's own included;
a run's `--plugin` files hand theirs in through `stages/plugins`).

    >>> sorted(KINDS)[:4]
    ['files', 'playbook', 'program', 'text']
    >>> make_kind("files", files=("a.py",)).name
    'files'
"""

from __future__ import annotations

from evoforge.infra.artifacts.base import Applied, ArtifactKind
from evoforge.infra.plugin_registry import Registry

__all__ = ["KINDS", "Applied", "ArtifactKind", "kind_class", "make_kind"]

KINDS: Registry[ArtifactKind] = Registry("artifact kind", ArtifactKind, prefix="kind", first="program")


def kind_class(name: str) -> type[ArtifactKind]:
    """The kind registered as `name`; KeyError naming the known kinds otherwise."""
    if name not in KINDS:
        raise KeyError(KINDS.unknown(name))
    return KINDS[name]


def make_kind(name: str, **spec) -> ArtifactKind:
    """The kind called `name`, made for a task; KeyError naming the known kinds otherwise."""
    return kind_class(name)(**spec)
