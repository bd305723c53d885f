"""Where a workspace keeps its cognition base, and opening it with the configured embedder."""

from __future__ import annotations

from pathlib import Path

from evoforge.cognition.embeddings import make_embedder
from evoforge.cognition.store import CognitionBase
from evoforge.infra.config import CognitionConfig


def cognition_folder(workspace: str | Path) -> Path:
    """The cognition base's folder in a workspace (shared by every run in it)."""
    return Path(workspace) / "cognition"


def open_base(cfg: CognitionConfig, workspace: str | Path) -> CognitionBase:
    """The workspace's cognition base with the embedder the config names."""
    return CognitionBase(cognition_folder(workspace), make_embedder(cfg))
