"""Where a run's cognition bases are (the one it writes, the ones it only reads), opening them with
the configured embedder, and who the items written come from."""

from __future__ import annotations

import getpass
from pathlib import Path

from evoforge.cognition.embedder import Embedder
from evoforge.cognition.embeddings import make_embedder
from evoforge.cognition.store import CognitionBase
from evoforge.infra.config import CognitionConfig


def cognition_folder(workspace: str | Path) -> Path:
    """The cognition base's folder in a workspace (shared by every run in it)."""
    return Path(workspace) / "cognition"


def base_location(cfg: CognitionConfig, workspace: str | Path) -> str | Path:
    """Where the base a run writes is: `cognition.uri`, else the workspace's folder."""
    return cfg.uri or cognition_folder(workspace)


def open_base(cfg: CognitionConfig, workspace: str | Path, embedder: Embedder | None = None) -> CognitionBase:
    """The base a run writes (`cognition.uri`, else the workspace's) with the configured embedder."""
    return CognitionBase(base_location(cfg, workspace), embedder or make_embedder(cfg))


def read_bases(cfg: CognitionConfig, embedder: Embedder) -> list[CognitionBase]:
    """The bases a run only reads (`cognition.read_uris`), with the same embedder as its own."""
    return [CognitionBase(uri, embedder) for uri in dict.fromkeys(cfg.read_uris) if uri != cfg.uri]


def person_of(cfg: CognitionConfig) -> str:
    """Who the items written come from: `cognition.person`, else the login name."""
    if cfg.person:
        return cfg.person
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's): say so, do not fail the run
        return "unknown"
