"""What a run is asked to do (`RunRequest`, the flow's only parameter) and what it is built from
(`Prepared`: config, task, LLM backend), built once per invocation.

The request holds no secret: the API key is excluded from every dump of the config, so it never
reaches Prefect's database. The CLI prepares the run itself (so that a bad task folder or an
unreachable LLM is a one-line error before any flow starts) and hands the prepared objects to
the flow it then starts; a flow run started any other way (a deployment) prepares itself.
"""

from __future__ import annotations

import difflib
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from evoforge.cognition.errors import CognitionError
from evoforge.cognition.onnx_embedder import require_packages
from evoforge.cognition.seeding import task_seeds
from evoforge.cognition.store import CognitionBase
from evoforge.cognition.workspace import open_base, read_bases
from evoforge.evaluators.isolation_notice import announce_isolation, unisolated_key_refusal
from evoforge.evaluators.task import Task, load_task
from evoforge.evaluators.task_files import TaskFiles
from evoforge.evaluators.task_model import TaskChannel, TaskModule
from evoforge.evaluators.task_model_client import TaskModelClient
from evoforge.infra.config import DEFAULT_MAX_WORKERS, DEFAULT_WORKERS, ConfigError, RunConfig
from evoforge.infra.llm.factory import endpoint_backend, make_backend
from evoforge.infra.llm.openai_backend import OpenAIBackend
from evoforge.infra.llm.router import Router
from evoforge.infra.llm.spending import SPENDING_FILE, Spending
from evoforge.infra.llm.types import LLMBackend
from evoforge.infra.process_local import ProcessLocal
from evoforge.infra.tracking import default_tracking_uri
from evoforge.stages.algorithms import Algorithm, AlgorithmError, algorithm_named
from evoforge.stages.pipeline.pipeline import Pipeline, PipelineError
from evoforge.stages.pipeline.stage import Stage
from evoforge.stages.plugins import PluginError, use_plugins
from evoforge.stages.promote import Promote
from evoforge.stages.research_prompt import seed_fit_error
from evoforge.stages.rounds.promotion import PROMOTE
from evoforge.stages.sample import SAMPLERS

log = logging.getLogger("evoforge.prepare")


class RunRequest(BaseModel):
    """The evolution flow's parameters (as Prefect records them): no secrets."""

    model_config = ConfigDict(extra="forbid")

    task: str  # a built-in task name or a task folder
    run_dir: str
    config: RunConfig = RunConfig()
    prefect_tasks: bool = True  # stages and evaluations as Prefect task runs
    quiet: bool = False


@dataclass
class Prepared(ProcessLocal):
    """The request with its parts built: the task loaded, the backend made (and checked)."""

    request: RunRequest
    task: Task
    llm: LLMBackend
    pipeline: Pipeline
    cognition: CognitionBase | None = None  # the base the run writes, shared by runs; None when off
    cognition_reads: tuple[CognitionBase, ...] = ()  # the bases it only reads (cognition.read_uris)
    analysis_llm: OpenAIBackend | None = None  # analyze.llm's endpoint; None: the run's LLM
    spending: Spending | None = None  # dollars spent on LLM calls, held to budget.max_cost_usd
    task_model: TaskModelClient | None = None  # a text task's TaskChannel, or a task_model: true task's
    checked: bool = False

    @property
    def config(self) -> RunConfig:
        return self.request.config

    @property
    def run_dir(self) -> Path:
        return Path(self.request.run_dir)

    @property
    def workspace(self) -> Path:
        return Path(self.config.workspace).resolve()

    async def check_llm(self, announce: bool = False) -> None:
        """Confirm an LLM server answers (once); with `announce`, say which backend runs."""
        if announce and not self.checked:  # what the sandbox cannot protect here, in one line each
            await announce_isolation(self.config.sandbox.isolate)
        if not self.checked and isinstance(self.llm, Router):
            described = await self.llm.check()
            if announce:
                print(f"[evoforge] LLMs: {described}", file=sys.stderr)
        elif not self.checked and isinstance(self.llm, OpenAIBackend):
            model = await self.llm.check()
            if announce:
                print(f"[evoforge] LLM: {model} at {self.config.llm.base_url}", file=sys.stderr)
        elif announce and not isinstance(self.llm, (OpenAIBackend, Router)):
            print("[evoforge] LLM: none configured, using the offline proposer (no LLM; set "
                  "--llm-base-url or EVOFORGE_LLM_BASE_URL to use one)", file=sys.stderr)
        if not self.checked and self.analysis_llm is not None:
            model = await self.analysis_llm.check()
            if announce:
                print(f"[evoforge] analysis LLM: {model} at {self.analysis_llm.base_url}", file=sys.stderr)
        own = self._task_model_endpoint()
        if not self.checked and own is not None:
            model = await own.check()
            if announce:
                print(f"[evoforge] task model: {model} at {own.base_url}", file=sys.stderr)
        if not self.checked:  # the seed's research prompt must fit the proposer's context window
            too_large = seed_fit_error(self.task, self.llm, self.config.llm.max_tokens)
            if too_large is not None:
                raise ConfigError(too_large)
        if not self.checked and self.spending is not None:
            self.spending.require_prices(self._priced_models())
            if self.request.run_dir:  # the cap covers the run: what its earlier sessions spent counts
                self.spending.resume(self.run_dir / SPENDING_FILE)
        self.checked = True

    def _priced_models(self) -> list[str]:
        """The models the run's calls go to (the offline proposer's cost nothing)."""
        models = list(self.llm.arms) if isinstance(self.llm, Router) else (
            [self.llm.model] if isinstance(self.llm, OpenAIBackend) else [])
        own = self._task_model_endpoint()
        return (models + ([self.analysis_llm.model] if self.analysis_llm is not None else [])
                + ([own.model] if own is not None else []))

    def _task_model_endpoint(self) -> OpenAIBackend | None:
        """The task model's own endpoint (`task_model.llm`); None when it is the proposer's."""
        own = self.task_model.backend if self.task_model is not None else None
        return own if isinstance(own, OpenAIBackend) and own is not self.llm else None


def with_workspace(cfg: RunConfig, run_dir: Path | None) -> RunConfig:
    """The config with the workspace the run uses: the one named (flag or config file), else, for
    a run folder given alone, that folder's parent (its MLflow store and cognition base beside it)."""
    if run_dir is None or "workspace" in cfg.model_fields_set:
        return cfg
    return cfg.model_copy(update={"workspace": str(run_dir.resolve().parent)})


def prepare(request: RunRequest) -> Prepared:
    """Load the task, fill the request's config with the algorithm's defaults (for the keys the user
    did not set), refuse to run unisolated beside an LLM key (evaluators/isolation_notice.py), build
    the pipeline (plug-ins included), make the LLM backend and open the cognition base (raises the
    user errors)."""
    cfg = request.config  # a seed given as prompts:/NAME@ALIAS is read from the workspace's MLflow
    run_plugins(cfg)  # first: a plug-in's artifact kind, sampler or algorithm is named below
    task = load_task(request.task,
                     cfg.tracking.tracking_uri or default_tracking_uri(Path(cfg.workspace).resolve()))
    TaskFiles.of(task.root)  # a bad .evoforgeignore is a one-line error now, not at each evaluation
    cfg = request.config = with_algorithm_defaults(request.config)
    check_sampler(cfg)
    refusal = unisolated_key_refusal(cfg)  # no isolation and an LLM key in reach: no start
    if refusal is not None:
        raise ConfigError(refusal)
    pipeline = build_pipeline(cfg, task)
    cognition = open_cognition(cfg, Path(cfg.workspace).resolve(), task)
    spending = Spending(cfg.budget.max_cost_usd, cfg.llm.prices)
    analysis = cfg.analyze.llm
    analysis_llm = (endpoint_backend(cfg.llm, analysis, cfg.seed, "analyze.llm", spending)
                    if analysis else None)
    llm = make_backend(cfg.llm, cfg.seed, spending)
    task_model = open_task_model(task, cfg, llm, spending) if task.needs_task_model else None
    reads = tuple(read_bases(cfg.cognition, cognition.embedder)) if cognition is not None else ()
    return Prepared(request, task, llm, pipeline, cognition, reads, analysis_llm, spending=spending,
                    task_model=task_model)


def open_task_model(task: Task, cfg: RunConfig, llm: LLMBackend, spending: Spending) -> TaskModelClient:
    """The way a task reaches its task model (a text task's prompt, or a `task_model: true` task's
    sandboxed evaluations): `task_model.llm`, else the proposer's server (the offline proposer
    cannot answer: a one-line error)."""
    what = (f"is a {task.kind} task" if task.uses_task_model
            else "declares task_model: true (its sandboxed evaluations call a task model)")
    if cfg.engine.executor != "loop":
        where = "scored in the run's process by its task model" if task.uses_task_model else \
            "its evaluations reach the task model through the run's process"
        raise ConfigError(f"engine.executor (--executor): task '{task.name}' {what}, {where}; use the "
                          f"loop executor")
    if cfg.task_model.llm is not None:
        backend: LLMBackend = endpoint_backend(cfg.llm, cfg.task_model.llm, cfg.seed, "task_model.llm",
                                               spending)
    elif isinstance(llm, (OpenAIBackend, Router)):
        backend = llm
    elif task.uses_task_model:
        noun = "prompt" if task.kind == "text" else task.kind
        raise ConfigError(f"task '{task.name}' is a {task.kind} task: a task model (an LLM) runs its {noun} "
                          f"on the cases, and the offline proposer cannot; set --llm-base-url (or "
                          f"task_model.llm)")
    else:
        raise ConfigError(f"task '{task.name}' declares task_model: true: its evaluations call a task "
                          f"model (an LLM), and the offline proposer cannot answer them; set "
                          f"--llm-base-url (or task_model.llm)")
    setting = cfg.task_model
    if task.uses_task_model:
        return TaskChannel(TaskModule(task), backend, concurrency=setting.concurrency,
                           max_tokens=setting.max_tokens, temperature=setting.temperature,
                           prices=cfg.llm.prices)
    return TaskModelClient(backend, concurrency=setting.concurrency, max_tokens=setting.max_tokens,
                           temperature=setting.temperature, prices=cfg.llm.prices,
                           max_calls_per_eval=setting.max_calls_per_eval)


def run_algorithm(cfg: RunConfig, task: Task | None = None) -> Algorithm:
    """The run's algorithm (`engine.algorithm`); with `task`, one that evolves the task's kind."""
    run_plugins(cfg)  # an algorithm of a --plugin file is known by its name
    try:
        algorithm = algorithm_named(cfg.engine.algorithm)
    except AlgorithmError as exc:
        raise ConfigError(f"engine.algorithm (--algorithm): {exc}") from None
    if task is not None and not algorithm.evolves(task.kind):
        raise ConfigError(f"engine.algorithm (--algorithm): {algorithm.name} evolves "
                          f"{', '.join(algorithm.kinds)} tasks; task '{task.name}' is a {task.kind} task")
    refusal = algorithm.refuses(task) if task is not None else None
    if refusal is not None:
        raise ConfigError(f"engine.algorithm (--algorithm): {refusal}")
    return algorithm


def run_plugins(cfg: RunConfig) -> list[Stage]:
    """Register the installed plug-ins and the run's (`engine.plugins`); the stages those add."""
    try:
        return use_plugins(cfg.engine.plugins)
    except PluginError as exc:
        raise ConfigError(f"engine.plugins (--plugin): {exc}") from None


def check_sampler(cfg: RunConfig) -> None:
    """Refuse a `search.sampler` no plug-in registered, naming the known ones."""
    if cfg.search.sampler not in SAMPLERS:
        raise ConfigError(f"search.sampler (--sampler): {SAMPLERS.unknown(cfg.search.sampler)}")


def with_algorithm_defaults(cfg: RunConfig) -> RunConfig:
    """The config with the run's algorithm's defaults for the keys the user did not set."""
    try:
        return run_algorithm(cfg).configure(cfg)
    except AlgorithmError as exc:
        raise ConfigError(f"engine.algorithm (--algorithm): {exc}") from None


def build_pipeline(cfg: RunConfig, task: Task | None = None) -> Pipeline:
    """The run's pipeline: the algorithm's stages (an algorithm that evolves `task`'s kind) with the
    configured plug-ins placed in it; a worker count or ceiling for a stage it does not have is a
    one-line error naming its stages."""
    algorithm = run_algorithm(cfg, task)
    try:
        line = algorithm.pipeline()
    except PipelineError as exc:
        raise ConfigError(f"engine.algorithm (--algorithm): {algorithm.name}: {exc}") from None
    try:
        pipeline = line.with_plugins(use_plugins(cfg.engine.plugins))
        if task is not None and task.gated and PROMOTE not in pipeline.names():  # every gated run promotes
            pipeline = Pipeline(pipeline.line, pipeline.side + (Promote(),))
    except (PluginError, PipelineError) as exc:
        raise ConfigError(f"engine.plugins (--plugin): {exc}") from None
    names = pipeline.names()
    for key, counts, defaults in (("engine.workers (--workers)", cfg.engine.workers, DEFAULT_WORKERS),
                                  ("adaptive.max_workers", cfg.adaptive.max_workers, DEFAULT_MAX_WORKERS)):
        # a default count for a stage the algorithm does not have (research in ace) is no error
        unknown = [name for name, count in counts.items()
                   if name not in names and defaults.get(name) != count]
        if unknown:
            close = difflib.get_close_matches(unknown[0], names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"{key}: no stage '{unknown[0]}'{hint}; the run's stages: {', '.join(names)}")
    return pipeline


def check_tracking_server(cfg: RunConfig, timeout_s: float = 5.0) -> None:
    """Refuse an MLflow server URL (`tracking.tracking_uri`) that does not answer, before the run
    starts: MLflow itself would retry for minutes, then run on without tracking."""
    uri = cfg.tracking.tracking_uri
    if not cfg.tracking.mlflow or not uri or not uri.startswith(("http://", "https://")):
        return
    try:
        httpx.get(f"{uri.rstrip('/')}/health", timeout=timeout_s)  # any answer: it is there
    except httpx.HTTPError as exc:
        raise ConfigError(f"tracking.tracking_uri {uri}: MLflow server unreachable ({type(exc).__name__}; "
                          f"start it, fix the URL, or pass --no-mlflow)") from None


def open_cognition(cfg: RunConfig, workspace: Path, task: Task) -> CognitionBase | None:
    """The base the run writes (the workspace's, or `cognition.uri`), with the task's seed items added."""
    if not cfg.cognition.enabled:
        return None
    if cfg.cognition.embedding == "onnx" and "embedding" not in cfg.cognition.model_fields_set:
        try:
            require_packages()
        except CognitionError as exc:  # the default, its packages missing: say so once, run without
            print(f"[evoforge] cognition base off: {exc}", file=sys.stderr)
            cfg.cognition.enabled = False  # so the run's config says so, and learn is left out
            return None
    base = open_base(cfg.cognition, workspace)
    added = base.add(task_seeds(task.root, task.name))
    log.info("cognition base %s: %d items (%d seeded from the task now), embedder %s",
             base.folder, base.count(), len(added), base.embedder.name)
    return base

