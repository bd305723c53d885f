"""The seed of a text or playbook task: its file in the task folder, or a version in MLflow's
Prompt Registry (`prompts:/NAME@ALIAS`, `prompts:/NAME/VERSION`), checked the same way."""

from __future__ import annotations

from pathlib import Path

from evoforge.evaluators.task_yaml import TASK_YAML, TaskError, one_line
from evoforge.infra.artifacts.playbook import parse_playbook
from evoforge.infra.mlflow_registry import PROMPT_SCHEME, RegistryError, read_prompt

REGISTRY_SEED_FILES = {"text": "prompt.md", "playbook": "playbook.md"}  # a registry seed's file name


def read_text_seed(root: Path, name: str, kind: str, registry_uri: str | None) -> tuple[str, str]:
    """(the artifact's file name, its text): `name` in `root`, or read from the registry at
    `registry_uri` when `name` is a prompts:/ URI (then the kind's own file name)."""
    if name.startswith(PROMPT_SCHEME):
        return REGISTRY_SEED_FILES[kind], _registry_text(name, registry_uri, kind)
    return name, _read_text_artifact(root, name, kind)


def _registry_text(uri: str, registry_uri: str | None, kind: str) -> str:
    """A seed prompt or playbook read from MLflow's Prompt Registry (checked as a file's is)."""
    if registry_uri is None:
        raise TaskError(f"{TASK_YAML}: {uri}: a seed in MLflow's Prompt Registry needs the workspace's "
                        f"MLflow store (evoforge run reads it)")
    try:
        text = read_prompt(uri, registry_uri)
    except RegistryError as exc:
        raise TaskError(f"{TASK_YAML}: {exc}") from None
    return _checked_text(text, uri, kind)


def _read_text_artifact(root: Path, name: str, kind: str) -> str:
    """A text task's prompt or a playbook task's playbook (which must parse as one)."""
    try:
        text = (root / name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"{name}: cannot read: {one_line(exc)}") from None
    return _checked_text(text, name, kind)


def _checked_text(text: str, name: str, kind: str) -> str:
    """`text`, refused when empty or (a playbook) when it does not parse as one."""
    if not text.strip():
        raise TaskError(f"{name}: the {'prompt' if kind == 'text' else 'playbook'} is empty")
    if kind == "playbook":
        try:
            parse_playbook(text)
        except ValueError as exc:
            raise TaskError(f"{name}: {exc}") from None
    return text
