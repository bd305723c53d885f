"""MLflow's registries: a run's winner as a prompt or model version, and a seed prompt read back.

A text or playbook task's best artifact becomes a new version of the prompt named after the task
(`registry_name`) in MLflow's Prompt Registry; an ML task's winner becomes a model version in the
Model Registry. Each version carries the `evoforge.*` tags of `Winner` (run name, run id, node
id, score, level, direction). The alias `evoforge-best` moves to the new version only when it
beats the version the alias points at (same level, strictly better under the task's direction),
or when no version holds the alias yet, or the holder's score is on another level; otherwise
the version is kept and the alias stays. Registering the same run's same node again changes
nothing (a sink's retry, a resumed run's close).

A seed prompt is read back from `prompts:/name@alias` or `prompts:/name/version`:

    >>> parse_prompt_uri("prompts:/house_style@evoforge-best")
    ('house_style', None, 'evoforge-best')
    >>> parse_prompt_uri("prompts:/house_style/3"), parse_prompt_uri("prompt.md")
    (('house_style', 3, None), None)
    >>> registry_name("my task/v2")
    'my-task-v2'
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evoforge.infra.tracking import sqlite_file

ALIAS = "evoforge-best"
PROMPT_SCHEME = "prompts:/"
MODEL_FOLDER = "best_model"  # the model's artifact path on the run's parent run
_URI = re.compile(r"^prompts:/([A-Za-z0-9_.-]+)(?:@([A-Za-z0-9_.-]+)|/([0-9]+))$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_TAGS = ("run_name", "run_id", "node_id", "score", "level", "direction")


class RegistryError(ValueError):
    """A registry entry that cannot be read (one line naming it)."""


def registry_name(task_name: str) -> str:
    """The task's name with the characters MLflow refuses in a prompt or model name made `-`."""
    return _UNSAFE.sub("-", task_name).strip("-") or "task"


def parse_prompt_uri(text: str) -> tuple[str, int | None, str | None] | None:
    """(name, version, alias) of a `prompts:/` URI, None for anything else; RegistryError for a
    `prompts:/` text of neither form."""
    if not text.startswith(PROMPT_SCHEME):
        return None
    match = _URI.match(text)
    if match is None:
        raise RegistryError(f"{text}: not a prompt URI (prompts:/NAME@ALIAS or prompts:/NAME/VERSION)")
    name, alias, version = match.groups()
    return name, int(version) if version else None, alias


def registry_client(tracking_uri: str) -> Any:
    """An MlflowClient whose tracking store and registry are `tracking_uri`."""
    from mlflow.tracking import MlflowClient

    schema = logging.getLogger("mlflow.store.db.utils")  # a new store's schema notes: not on the terminal
    if schema.level < logging.WARNING:  # (the tracker may have set it higher still)
        schema.setLevel(logging.WARNING)
    return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def read_prompt(uri: str, tracking_uri: str) -> str:
    """The text of the prompt version `uri` names in the registry at `tracking_uri`."""
    from mlflow.exceptions import MlflowException

    parsed = parse_prompt_uri(uri)
    if parsed is None:
        raise RegistryError(f"{uri}: not a prompt URI")
    name, version, alias = parsed
    store = sqlite_file(tracking_uri)
    if store is not None and not store.is_file():
        raise RegistryError(f"{uri}: no MLflow store at {store} (nothing is registered there)")
    client = registry_client(tracking_uri)
    try:
        found = (client.get_prompt_version_by_alias(name, alias) if alias is not None
                 else client.get_prompt_version(name, version))
    except MlflowException as exc:
        raise RegistryError(f"{uri}: {_first_line(exc)} (registry {tracking_uri})") from None
    if found is None:
        raise RegistryError(f"{uri}: not found (registry {tracking_uri})")
    if not found.is_text_prompt:
        raise RegistryError(f"{uri}: a chat prompt; evoforge evolves a text prompt")
    return str(found.template)


@dataclass(frozen=True)
class Winner:
    """The candidate a version is made from, as its `evoforge.*` tags say."""

    run_name: str
    run_id: str  # the run's parent MLflow run
    node_id: str
    score: float
    level: str
    maximize: bool

    def tags(self) -> dict[str, str]:
        """The version's tags."""
        values = (self.run_name, self.run_id, self.node_id, repr(float(self.score)), self.level,
                  "maximize" if self.maximize else "minimize")
        return {f"evoforge.{key}": value for key, value in zip(_TAGS, values, strict=True)}

    def beats(self, tags: dict[str, str]) -> bool:
        """True when this winner should take the alias from the version with `tags`."""
        try:
            theirs = float(tags["evoforge.score"])
        except (KeyError, ValueError):
            return True  # not one of ours, or not scored: the alias goes to a scored version
        if tags.get("evoforge.level") != self.level or not math.isfinite(theirs):
            return True
        return self.score > theirs if self.maximize else self.score < theirs


@dataclass(frozen=True)
class Registered:
    """A registered version and where the alias points afterwards."""

    scheme: str  # prompts or models
    name: str
    version: int
    alias_version: int
    moved: bool  # the alias moved to this version

    @property
    def uri(self) -> str:
        """The alias's URI, `prompts:/NAME@evoforge-best` or `models:/NAME@evoforge-best`."""
        return f"{self.scheme}:/{self.name}@{ALIAS}"

    def line(self) -> str:
        """One sentence for the report and the terminal."""
        own = f"{self.scheme}:/{self.name}/{self.version}"
        if self.moved:
            return f"{self.uri} (version {self.version}, {own})"
        return (f"{self.uri} (stays on version {self.alias_version}; this run's winner is {own}, "
                f"not better)")


def register_prompt(client: Any, name: str, text: str, winner: Winner) -> Registered:
    """`text` as a version of prompt `name` (or the version this run's node already has), with
    the alias moved when it beats the aliased version."""
    from mlflow.exceptions import MlflowException

    versions = _pages(lambda token: client.search_prompt_versions(name, max_results=100, page_token=token)) \
        if client.get_prompt(name) is not None else []
    version = _ours(versions, winner)
    if version is None:
        message = (f"evoforge run {winner.run_name}: node {winner.node_id}, {winner.level} score "
                   f"{winner.score:g}")
        version = int(client.register_prompt(name, text, commit_message=message, tags=winner.tags()).version)
    try:
        current = client.get_prompt_version_by_alias(name, ALIAS)
    except MlflowException:  # no version holds the alias yet
        current = None
    if current is not None and (int(current.version) == version or not winner.beats(current.tags)):
        return Registered("prompts", name, version, int(current.version), int(current.version) == version)
    client.set_prompt_alias(name, ALIAS, version)
    return Registered("prompts", name, version, version, True)


def register_model(client: Any, name: str, folder: Path, winner: Winner) -> Registered:
    """The pyfunc model saved in `folder` logged on the run's parent run (`best_model/`) and
    registered as a version of model `name` (or the version this run's node already has), with
    the alias moved when it beats the aliased version."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name, description="an evoforge task's winners",
                                       tags={"evoforge.task": name})
    versions = _pages(lambda token: client.search_model_versions(f"name = '{name}'", page_token=token))
    version = _ours(versions, winner)
    if version is None:
        client.log_artifacts(winner.run_id, str(folder), MODEL_FOLDER)
        source = f"{client.get_run(winner.run_id).info.artifact_uri.rstrip('/')}/{MODEL_FOLDER}"
        version = int(client.create_model_version(name, source, run_id=winner.run_id, tags=winner.tags(),
                                                  description=f"node {winner.node_id}").version)
    try:
        current = client.get_model_version_by_alias(name, ALIAS)
    except MlflowException:
        current = None
    if current is not None and (int(current.version) == version or not winner.beats(current.tags)):
        return Registered("models", name, version, int(current.version), int(current.version) == version)
    client.set_registered_model_alias(name, ALIAS, str(version))
    return Registered("models", name, version, version, True)


def _ours(versions: Iterable[Any], winner: Winner) -> int | None:
    """The version already made for this run's node, if any."""
    for entry in versions:
        tags = entry.tags or {}
        if tags.get("evoforge.run_id") == winner.run_id and tags.get("evoforge.node_id") == winner.node_id:
            return int(entry.version)
    return None


def _pages(search: Callable[[str | None], Any]) -> list[Any]:
    """Every entry of a paged MLflow search."""
    found: list[Any] = []
    token = None
    while True:
        page = search(token)
        found += list(page)
        token = page.token
        if not token:
            return found


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().partition("\n")[0]
