"""`evoforge doctor`: what this machine gives a run, one line per part, before a run finds out.

Each check answers for the config a run would use (``--config``, the same flags as ``evoforge
run`` for the workspace and the LLM): the sandbox's isolation and which kind, the process limit
(cgroups), the embedder, the LLM endpoints, the Prefect API, the MLflow store, the free disk and,
when the config selects it, the Dask scheduler. A check whose part the config needs and that
fails is ``MISSING`` and makes the exit code 1; a weaker-than-best part that still works is
``warn``. The isolation line is the run's own decision (evaluators/isolation_notice.py): MISSING
exactly when `evoforge run` would refuse to start (no isolation here and an LLM key in reach), warn
when a run goes ahead with a notice. Every LLM endpoint is probed (the main one or the router's,
``analyze.llm``, ``task_model.llm``), each with only the key it gets in a run (infra/llm/keys.py);
no key is printed. Example::

    $ evoforge doctor
    ok       isolation  userns: user, pid, network and mount namespaces; read-only filesystem
    ok       processes  rlimit-nproc (RLIMIT_NPROC per evaluation)
    ...
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from evoforge.infra.config import ConfigError, RunConfig
from evoforge.infra.llm import keys

TIMEOUT_S = 5.0
LOW_DISK_B = 2 << 30  # under 2 GiB free: a warning (MLflow, the node database and run folders grow)
FULL_DISK_B = 200 << 20  # under 200 MiB: missing (a run would fail writing its records)
OK, WARN, MISSING, OFF = "ok", "warn", "MISSING", "off"


@dataclass(frozen=True)
class Check:
    """One line of the report: the part, its state and what was found (or how to get it)."""

    part: str
    state: str  # ok, warn, MISSING (the config needs it) or off (the config does not use it)
    detail: str

    def line(self) -> str:
        return f"{self.state:<8} {self.part:<10} {self.detail}"


def doctor(cfg: RunConfig) -> list[Check]:
    """Every check, in order; a check that raises is reported as its own failure, never dropped."""
    checks: list[Check] = []
    parts: list[tuple[str, Callable[[RunConfig], Check]]] = [
        ("isolation", check_isolation), ("processes", check_processes), ("embedder", check_embedder),
        ("llm", check_llm), ("prefect", check_prefect), ("mlflow", check_mlflow),
        ("disk", check_disk), ("dask", check_dask)]
    for part, check in parts:
        try:
            checks.append(check(cfg))
        except Exception as exc:  # a check's own failure is that part's answer: say it, go on
            checks.append(Check(part, MISSING, f"the check failed: {type(exc).__name__}: {exc}"))
    return checks


def check_isolation(cfg: RunConfig) -> Check:
    """The run's own decision (evaluators/isolation_notice.py): a run that would refuse is MISSING."""
    from evoforge.evaluators.isolation_notice import REFUSE, isolation_verdict

    verdict = isolation_verdict(cfg)
    return Check("isolation", MISSING if verdict.state == REFUSE else verdict.state, verdict.detail)


def check_processes(cfg: RunConfig) -> Check:
    from evoforge.evaluators.cgroup_pids import process_limit_mechanism

    mechanism = process_limit_mechanism()
    if mechanism == "cgroup-pids":
        return Check("processes", OK, "cgroup-pids (a pids cgroup per evaluation)")
    if mechanism == "rlimit-nproc":
        return Check("processes", OK, "rlimit-nproc (RLIMIT_NPROC per evaluation)")
    return Check("processes", WARN, "none: as root RLIMIT_NPROC does not hold and no pids cgroup may be "
                                    "made here (mount cgroup2 with the pids controller delegated)")


def check_embedder(cfg: RunConfig) -> Check:
    if not cfg.cognition.enabled:
        return Check("embedder", OFF, "cognition.enabled: false")
    from evoforge.cognition.embeddings import make_embedder

    started = time.monotonic()
    embedder = make_embedder(cfg.cognition)
    rows = embedder.embed(["evoforge doctor checks the embedder"])
    took = time.monotonic() - started
    if rows.shape != (1, embedder.dim):
        return Check("embedder", MISSING, f"{embedder.name}: returned shape {rows.shape}, "
                                          f"not (1, {embedder.dim})")
    return Check("embedder", OK, f"{embedder.name}, {embedder.dim}-d, loaded and embedded in {took:.1f} s")


def check_llm(cfg: RunConfig) -> Check:
    endpoints = llm_endpoints(cfg)
    if not endpoints:
        return Check("llm", OFF, "no LLM configured: runs use the offline proposer and say so "
                                 "(--llm-base-url or llm.base_url for a real one)")
    found, failed = [], []
    for where, base_url, key_env in endpoints:
        try:
            key = keys.endpoint_key(cfg.llm, base_url, key_env, where)
        except ConfigError as exc:
            failed.append(f"{base_url}: {exc}")
            continue
        try:
            answer = httpx.get(f"{base_url.rstrip('/')}/models", timeout=TIMEOUT_S,
                               headers={"Authorization": f"Bearer {key}"} if key else {})
        except httpx.HTTPError as exc:
            failed.append(f"{base_url}: unreachable ({type(exc).__name__})")
            continue
        if answer.status_code != 200:
            hint = f" (no key sent: set {where}.api_key_env)" if answer.status_code == 401 and not key else ""
            failed.append(f"{base_url}: HTTP {answer.status_code} on /models{hint}")
            continue
        models = [m.get("id") for m in answer.json().get("data", []) if isinstance(m, dict)]
        found.append(f"{base_url} ({', '.join(map(str, models[:3])) or 'no models listed'})")
    if failed:
        return Check("llm", MISSING, "; ".join(failed + found))
    return Check("llm", OK, "; ".join(found))


def llm_endpoints(cfg: RunConfig) -> list[tuple[str, str, str | None]]:
    """(config key, base URL, api_key_env) of every LLM endpoint the config names, each base URL
    and key variable once: the main one or the router's, then the Analyzer's and the task model's."""
    named = [(f"llm.endpoints.{i}", str(e.base_url), e.api_key_env) for i, e in enumerate(cfg.llm.endpoints)]
    if not named and cfg.llm.base_url is not None:
        named = [("llm", str(cfg.llm.base_url), None)]
    named += [(where, str(e.base_url), e.api_key_env)
              for where, e in (("analyze.llm", cfg.analyze.llm), ("task_model.llm", cfg.task_model.llm))
              if e is not None]
    seen: set[tuple[str, str | None]] = set()
    unique = []
    for where, base_url, key_env in named:
        if (base_url.rstrip("/"), key_env) not in seen:
            seen.add((base_url.rstrip("/"), key_env))
            unique.append((where, base_url, key_env))
    return unique


def check_prefect(cfg: RunConfig) -> Check:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        return Check("prefect", OK, "no PREFECT_API_URL: each run starts Prefect's temporary server "
                                    "(~10 s); set it to use a `prefect server start` and its UI")
    try:
        answer = httpx.get(f"{url.rstrip('/')}/health", timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        return Check("prefect", MISSING, f"PREFECT_API_URL {url}: unreachable ({type(exc).__name__})")
    if answer.status_code != 200:
        return Check("prefect", MISSING, f"PREFECT_API_URL {url}: HTTP {answer.status_code} on /health")
    return Check("prefect", OK, f"PREFECT_API_URL {url} answers")


def check_mlflow(cfg: RunConfig) -> Check:
    if not cfg.tracking.mlflow:
        return Check("mlflow", OFF, "tracking.mlflow: false")
    from evoforge.infra.tracking import default_tracking_uri, is_server

    workspace = Path(cfg.workspace).resolve()
    uri = cfg.tracking.tracking_uri or default_tracking_uri(workspace)
    if is_server(uri):
        try:
            httpx.get(f"{uri.rstrip('/')}/health", timeout=TIMEOUT_S)
        except httpx.HTTPError as exc:
            return Check("mlflow", MISSING, f"{uri}: MLflow server unreachable ({type(exc).__name__})")
        return Check("mlflow", OK, f"{uri} answers")
    if uri.startswith("sqlite:///"):
        folder = _existing(Path(uri.removeprefix("sqlite:///")).parent)
        if not os.access(folder, os.W_OK):
            return Check("mlflow", MISSING, f"{uri}: {folder} is not writable")
        return Check("mlflow", OK, f"{uri} (sqlite; {folder} writable)")
    return Check("mlflow", OK, f"{uri}")


def check_disk(cfg: RunConfig) -> Check:
    folder = _existing(Path(cfg.workspace).resolve())
    free = shutil.disk_usage(folder).free
    text = f"{free / (1 << 30):.1f} GiB free at {folder}"
    if free < FULL_DISK_B:
        return Check("disk", MISSING, text)
    return Check("disk", WARN if free < LOW_DISK_B else OK, text)


def check_dask(cfg: RunConfig) -> Check:
    if cfg.engine.executor != "dask":
        return Check("dask", OFF, f"engine.executor: {cfg.engine.executor}")
    try:
        import prefect_dask  # noqa: F401  (the dask extra)
    except ImportError:
        return Check("dask", MISSING, "engine.executor: dask needs prefect-dask: "
                                      "pip install 'evoforge[dask]'")
    if not cfg.engine.dask_address:
        return Check("dask", OK, "a local cluster per run (prefect-dask installed)")
    from distributed import Client

    try:
        with Client(cfg.engine.dask_address, timeout=TIMEOUT_S) as client:
            workers = len(client.scheduler_info().get("workers", {}))
    except OSError as exc:
        return Check("dask", MISSING, f"{cfg.engine.dask_address}: unreachable ({exc})")
    return Check("dask", OK if workers else WARN, f"{cfg.engine.dask_address}: {workers} workers")


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (the workspace may not exist before a first run)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
