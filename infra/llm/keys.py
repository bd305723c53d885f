"""Where a run's config finds its LLM keys: every environment variable it names, in one place.

A key is read late, from the environment of the process that calls the LLM (infra/llm/factory.py);
this module lists the variables a config may read a key from, so that whatever must keep keys
away from candidates (the refusal to run unisolated beside a key, evaluators/isolation_notice.py;
the local Dask workers' blanked environment, stages/evaluation/dask_executor.py) covers them all:
``OPENAI_API_KEY`` (the main LLM's key, the key of every endpoint without its own, and the
``openai`` embedder's) and the ``api_key_env`` of every endpoint a config names (``llm.endpoints``,
``analyze.llm``, ``task_model.llm``). A variable set to the empty string holds no key. Example::

    key_env_names(cfg)       # ['ANALYZE_KEY', 'OPENAI_API_KEY']
    keys_in_reach(cfg)       # ['OPENAI_API_KEY']: the ones set (non-empty) here
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from evoforge.infra.config import EndpointConfig, RunConfig

MAIN_KEY_ENV = "OPENAI_API_KEY"
CONFIG_KEY = "llm.api_key"  # a key written in the config file itself (not from the environment)


def configured_endpoints(cfg: RunConfig) -> list[EndpointConfig]:
    """Every endpoint the config names: the router's, the Analyzer's and the task model's."""
    return [*cfg.llm.endpoints, *(e for e in (cfg.analyze.llm, cfg.task_model.llm) if e is not None)]


def key_env_names(cfg: RunConfig) -> list[str]:
    """Every environment variable the run may read an LLM key from, sorted."""
    return sorted({MAIN_KEY_ENV, *(e.api_key_env for e in configured_endpoints(cfg) if e.api_key_env)})


def keys_in_reach(cfg: RunConfig, environ: Mapping[str, str] | None = None) -> list[str]:
    """The key variables set (non-empty) in `environ` (default: this process's), and ``llm.api_key``
    when the config holds a key of its own; names only, never a value."""
    env = os.environ if environ is None else environ
    names = [name for name in key_env_names(cfg) if env.get(name)]
    own = cfg.llm.api_key.get_secret_value() if cfg.llm.api_key is not None else ""
    if own and own != env.get(MAIN_KEY_ENV):
        names.append(CONFIG_KEY)
    return names
