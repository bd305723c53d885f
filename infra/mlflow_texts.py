"""A run's text artifacts (report, analysis, prompt) written in one go: straight into the run's
artifact folder when it is local, else one upload from a staging folder. Imported on the MLflow
sink's thread only (it imports MLflow)."""

from __future__ import annotations

import posixpath
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.utils.file_utils import local_file_uri_to_path


def check_text_name(name: str) -> None:
    """Refuse an artifact name that is not a plain relative path."""
    norm = posixpath.normpath(name)
    if not name or norm != name or norm == "." or norm.startswith(("/", "..")):
        raise MlflowException(f"Bad artifact file name {name!r}: must be a relative path "
                              "without '..'", INVALID_PARAMETER_VALUE)


def is_local(uri: str) -> bool:
    """Whether an artifact URI is a local folder."""
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and scheme.isalpha())  # a windows drive


def write_texts(artifact_uri: str, texts: dict[str, str], tracking_uri: str | None) -> None:
    """The run's text artifacts: written straight into its folder if it is local, else uploaded
    in one ``log_artifacts`` call from a staging folder."""
    texts = {name: text for name, text in texts.items() if text}
    if not texts:
        return
    for name in texts:
        check_text_name(name)
    if is_local(artifact_uri):
        root = Path(local_file_uri_to_path(artifact_uri))
        made: set[Path] = set()
        for name, text in texts.items():
            path = root / name
            if path.parent not in made:
                path.parent.mkdir(parents=True, exist_ok=True)
                made.add(path.parent)
            path.write_text(text, encoding="utf-8")
        return
    with tempfile.TemporaryDirectory(prefix="mlflow-bulk-") as folder:
        for name, text in texts.items():
            path = Path(folder, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        get_artifact_repository(artifact_uri, tracking_uri=tracking_uri).log_artifacts(folder)
