"""Artifact kinds: what a task evolves (`task.yaml`: `kind:`), one module each.

    >>> sorted(KINDS)
    ['files', 'playbook', 'program', 'text']
    >>> make_kind("files", files=("a.py",)).name
    'files'
"""

from __future__ import annotations

from evoforge.infra.artifacts.base import Applied, ArtifactKind
from evoforge.infra.artifacts.files import Files
from evoforge.infra.artifacts.playbook import Playbook
from evoforge.infra.artifacts.program import Program
from evoforge.infra.artifacts.text import Text

__all__ = ["KINDS", "Applied", "ArtifactKind", "make_kind"]

KINDS: dict[str, type[ArtifactKind]] = {kind.name: kind for kind in (Program, Files, Text, Playbook)}


def make_kind(name: str, **spec) -> ArtifactKind:
    """The kind called `name`, made for a task; KeyError naming the known kinds otherwise."""
    if name not in KINDS:
        raise KeyError(f"unknown artifact kind '{name}' (kinds: {', '.join(KINDS)})")
    return KINDS[name](**spec)
