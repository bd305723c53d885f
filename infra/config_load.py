"""Loading the run configuration: a YAML file, overridden by environment variables, then by
dotted-key overrides (the CLI's flags); a bad value or an unknown key is one line naming where it
came from (infra/config.py holds the sections and their checks).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from evoforge.infra.config import ConfigError, RunConfig
from evoforge.infra.config_errors import describe

# keys of earlier versions, refused with the new name (or why they are gone) in one line
RENAMED_KEYS = {
    "adaptive.max_research": "is now adaptive.max_workers.research",
    "adaptive.max_engineer": "is now adaptive.max_workers.engineer",
    "engine.commit_interval_s": "is gone: records are written by sinks off the hot path, in batches",
}


def _refuse_renamed(data: dict[str, Any], source: str | None) -> None:
    for dotted, why in RENAMED_KEYS.items():
        node: Any = data
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        else:
            raise ConfigError(f"{source or 'config'}: {dotted} {why}")


ENV_VARS = {
    "EVOFORGE_LLM_BASE_URL": ("llm", "base_url"),
    "EVOFORGE_LLM_MODEL": ("llm", "model"),
    "OPENAI_API_KEY": ("llm", "api_key"),
}


def _set_path(data: dict[str, Any], dotted: str, value: Any, source: str | None = None) -> None:
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{source or 'config'}: '{part}' is not a section of keys "
                              f"(cannot set '{dotted}')")
    node[parts[-1]] = value


def load_config(
    path: str | os.PathLike | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
    origins: Mapping[str, str] | None = None,
) -> RunConfig:
    """Build the run config from a YAML file, the environment, then dotted-key overrides.

    A bad value or unknown key raises ConfigError naming where it came from: the override's
    name in `origins` (its CLI flag, e.g. ``{"budget.max_evals": "--max-evals"}``), the
    environment variable, or the file and its key; an unknown key gets a "did you mean"."""
    data: dict[str, Any] = {}
    source = None
    if path is not None:
        source = str(path)
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file not found: {file}")
        try:
            loaded = yaml.safe_load(file.read_text()) or {}
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{file}: cannot read it ({type(exc).__name__}: {exc})") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f" at line {mark.line + 1}" if mark else ""
            raise ConfigError(f"{file}: not valid YAML{line}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{file}: the top level must be a mapping of keys")
        data = loaded
    env = os.environ if environ is None else environ
    named: dict[str, str] = {}
    for var, (section, key) in ENV_VARS.items():
        if env.get(var):
            _set_path(data, f"{section}.{key}", env[var], source)
            named[f"{section}.{key}"] = var
    for dotted, value in (overrides or {}).items():
        if value is not None:
            _set_path(data, dotted, value, source)
            named[dotted] = (origins or {}).get(dotted, f"override {dotted}")
    _refuse_renamed(data, source)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(describe(exc, RunConfig, source, named)) from None
