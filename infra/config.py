"""Run configuration: its sections, their defaults and the checks across them (loaded from a YAML
file, the environment and the CLI's flags by infra/config_load.py).

Every key is read somewhere; an unknown key is an error that names it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    model_validator,
)

from evoforge.infra.config_base import ConfigError, HttpURL, _Section  # noqa: F401  (re-exported)
from evoforge.infra.config_llm import (  # noqa: F401  (re-exported: the sections' one import)
    CircuitConfig,
    EndpointConfig,
    LLMConfig,
    ModelPrice,
    SchedulerConfig,
)


class BudgetConfig(_Section):
    """When the run stops: whichever limit is reached first."""

    max_evals: int = Field(default=100, ge=1)
    max_wall_s: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)  # USD of the run's LLM calls, all sessions
    max_proposals: int | None = Field(default=None, ge=1)

    def proposal_cap(self) -> int:
        """Proposals allowed in all, failed ones included, so a broken LLM cannot loop forever."""
        return self.max_proposals or 4 * self.max_evals


DEFAULT_WORKERS = {"research": 8, "engineer": 2}  # LLM calls at once; evaluations at once
DEFAULT_MAX_WORKERS = {"research": 32, "engineer": 8}  # adaptive control's ceilings
WorkerCount = Annotated[int, Field(ge=1, le=512)]


def _with_defaults(defaults: dict[str, int]) -> Any:
    """A validator merging a configured {stage: count} onto `defaults` (naming one stage keeps
    the others' defaults)."""
    def merge(value: Any) -> Any:
        return {**defaults, **value} if isinstance(value, dict) else value
    return merge


class EngineConfig(_Section):
    """Which algorithm runs, and how its stages are scheduled."""

    algorithm: str = "asi-evolve"  # which stages make up the run: a name (evoforge algorithms) or a .py file
    mode: Literal["async", "sync"] = "async"
    # per stage, by name (`evoforge stages` lists them); a stage not named follows the one it is
    # sized like (LLM stages: research; reflect, param_search: engineer)
    workers: Annotated[dict[str, WorkerCount], BeforeValidator(_with_defaults(DEFAULT_WORKERS))] = Field(
        default_factory=lambda: dict(DEFAULT_WORKERS))
    queue_size: int | None = Field(default=None, ge=1)  # researched candidates waiting; None: engineers
    # items a stage's input queue holds before the stage feeding it waits (back-pressure,
    # flows/stage_pool.py); None: twice the stage's workers
    stage_queue: int | None = Field(default=None, ge=1)
    progress_interval_s: float = Field(default=2.0, gt=0)
    # Prefect task runs: one per evaluation (default), or one per stage run as well (the Prefect UI
    # then shows every item's way through the pipeline, at ~5 ms of CPU per task run)
    task_runs: Literal["evaluations", "stages"] = "evaluations"
    plugins: list[str] = Field(default_factory=list)  # plug-ins: .py files, modules, installed stages' names
    # where evaluation task runs go (stages/evaluation/prefect_tasks.py): loop, threads, a Dask cluster
    executor: Literal["loop", "threads", "dask"] = "loop"
    dask_address: str | None = None  # dask: a scheduler, e.g. tcp://host:8786; None: a local cluster

    @model_validator(mode="after")
    def _dask_address_needs_dask(self) -> EngineConfig:
        if self.dask_address is not None and self.executor != "dask":
            raise ValueError(f"dask_address is set but executor is '{self.executor}': "
                             "set executor: dask (--executor dask)")
        return self


class StalenessConfig(_Section):
    """What happens to an item designed against an older pool version (FlashEvolve)."""

    policy: Literal["full", "guarded", "reflective"] = "full"
    max_staleness: int = Field(default=2, ge=0)  # guarded: drop past this
    similarity_threshold: float = Field(default=0.2, ge=0, le=1)  # reflective: reflect only above


class SpeculationConfig(_Section):
    """Speculative stage completion over an evaluator's validation cases."""

    alpha_spec: float | None = Field(default=None, gt=0, le=1)  # None: off
    reorder_window: int = Field(default=3, ge=1)  # cases passed this many rounds move to the back
    prune: bool = True  # stop an evaluation whose prefix cannot beat the pool


class AdaptiveConfig(_Section):
    """Worker counts that follow each stage's measured rate."""

    enabled: bool = False
    tau_s: float = Field(default=5.0, gt=0)
    min_workers: int = Field(default=1, ge=1)
    max_workers: Annotated[dict[str, WorkerCount],  # per stage, like engine.workers
                           BeforeValidator(_with_defaults(DEFAULT_MAX_WORKERS))] = Field(
        default_factory=lambda: dict(DEFAULT_MAX_WORKERS))


class SearchConfig(_Section):
    """How parents and inspirations are chosen, and which candidates count as novel."""

    sampler: str = Field(default="greedy", min_length=1)
    exploration: float = Field(default=0.2, ge=0, le=1)  # share of parents drawn uniformly
    exploitation: float = Field(default=0.6, ge=0, le=1)  # share of parents that are a best node
    elite_size: int = Field(default=5, ge=1)  # the rest come from the top elite_size
    num_inspirations: int = Field(default=3, ge=0, le=10)  # labelled best / diverse / recent
    ucb1_c: float = Field(default=1.0, ge=0)  # UCB1: normalised score + c * sqrt(ln N / n_i)
    map_elites_features: list[str] = Field(default_factory=lambda: ["complexity", "diversity"],
                                           min_length=1, max_length=4)
    map_elites_bins: int = Field(default=10, ge=2, le=1000)  # bins per feature dimension
    feature_ranges: dict[str, tuple[float, float]] = Field(default_factory=dict)  # task-metric features
    islands: int = Field(default=5, ge=1, le=1000)
    migration_interval: int = Field(default=10, ge=1)  # generations (one child per island each)
    migration_rate: float = Field(default=0.1, ge=0, le=1)  # share of an island that migrates
    credit_weight: float = Field(default=0.0, ge=0)  # weight of descendant credit; 0: off
    credit_decay: float = Field(default=0.5, gt=0, le=1)  # per generation up the lineage
    novelty_threshold: float | None = Field(default=None, gt=0, le=1)  # reject at this similarity
    novelty_backend: Literal["minhash", "embedding"] = "minhash"  # embedding: the cognition embedder

    @model_validator(mode="after")
    def _ratios(self) -> SearchConfig:
        if self.exploration + self.exploitation > 1 + 1e-9:
            raise ValueError("exploration + exploitation must be <= 1")
        for name in self.map_elites_features:
            if name not in ("complexity", "diversity") and name not in self.feature_ranges:
                raise ValueError(f"map_elites_features: '{name}' is a task metric and needs "
                                 f"feature_ranges.{name}: [low, high]")
        for name, (low, high) in self.feature_ranges.items():
            if not low < high:
                raise ValueError(f"feature_ranges.{name}: low must be below high")
        return self


class SandboxConfig(_Section):
    """Limits of one candidate evaluation."""

    timeout_s: float | None = Field(default=None, gt=0)
    memory_mb: int = Field(default=2048, ge=64)
    max_procs: int = Field(default=64, ge=1)
    max_open_files: int = Field(default=512, ge=16)
    isolate: bool = True  # as root: a dedicated uid, no network, a read-only filesystem
    expose: list[str] = []  # isolated: paths it may read behind closed folders (e.g. ~/.cargo)
    # isolated: MB one evaluation may write in its private directory (a tmpfs holding the task
    # folder's copy too); a candidate that fills it fails alone with "No space left on device"
    scratch_mb: int = Field(default=1024, ge=16)
    warm: bool = True  # fork each evaluation from a per-task fork server with the imports loaded


class TaskModelConfig(_Section):
    """The LLM a text task's prompt is run with on its cases (evaluators/task_model.py)."""

    llm: EndpointConfig | None = None  # None: the proposer's LLM
    concurrency: int = Field(default=8, ge=1)  # task-model calls at once, over every evaluation
    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.0, ge=0)
    # task-model calls one sandboxed evaluation may make (task_model: true); more are refused, the
    # candidate gets the reason and the node counts them (task_model_refused)
    max_calls_per_eval: int = Field(default=256, ge=1)


class GepaConfig(_Section):
    """GEPA (engine.algorithm: gepa): reflective evolution of a prompt or playbook on its cases."""

    minibatch: int = Field(default=3, ge=1)  # train cases per rollout, reflected on together
    merge_every: int = Field(default=0, ge=0)  # every Nth candidate merges two Pareto-front members (0: off)


class AceConfig(_Section):
    """ACE (engine.algorithm: ace): generator -> reflector -> curator on a playbook. offline: the
    train cases in order, `batch` a step, round and round; online: the val cases once each, in
    order, each answered with the newest playbook before it is learned from."""

    mode: Literal["offline", "online"] = "offline"
    batch: int = Field(default=2, ge=1)  # cases the generator answers per step


class AnalyzeConfig(_Section):
    """The Analyzer: a structured report on every evaluated candidate, lessons written back."""

    enabled: bool = True
    max_output_chars: int = Field(default=2000, ge=200)  # evaluator output / errors it is shown
    write_back: bool = True  # lessons that generalise go to the cognition base, deduplicated
    # the LLM calls analysis costs: a share of the candidates (chosen by node id, so a resumed run
    # picks the same), several candidates per call, another endpoint (a smaller model)
    share: float = Field(default=1.0, gt=0, le=1)
    batch: int = Field(default=1, ge=1, le=32)  # candidates per call
    batch_wait_s: float = Field(default=10.0, gt=0)  # the longest a candidate waits for its batch
    llm: EndpointConfig | None = None  # None: the run's LLM
    # when the LLM binds (calls wait for the scheduler's slots), analyse by what a candidate can
    # teach (a new best always, then the largest change, a new failure kind, a branch's first) and
    # give the rest the deterministic summary; off: every candidate waits for the LLM
    by_value: bool = True
    max_waiting: int = Field(default=2, ge=0)  # such analyses waiting for a slot at once (new bests apart)
    bound_share: float = Field(default=0.02, ge=0, le=1)  # most the bound LLM analyses (new bests apart)
    # the Analyzer's causal claims tested by counterfactual runs (stages/verify.py)
    verify_share: float = Field(default=0.1, ge=0, le=1)  # most of the run's evaluations they spend (0: off)
    verify_repeats: int = Field(default=3, ge=2, le=20)  # runs per side when the evaluator is noisy
    verify_max_claims: int = Field(default=1, ge=1, le=10)  # claims checked per candidate (largest first)


class JudgeConfig(_Section):
    """An optional LLM judge blended into fitness (0: off)."""

    weight: float = Field(default=0.0, ge=0, le=1)


class GuardConfig(_Section):
    """The engineer's guardrails before and after the expensive evaluation."""

    quick_test: bool = True  # run the task's quick test, when it declares one, before evaluating
    repair_attempts: int = Field(default=1, ge=0, le=5)  # LLM repairs of a candidate that crashes
    accept_failing_seed: bool = False  # evolve from a seed whose evaluator reports an error with its score


class ParamSearchConfig(_Section):
    """Optuna TPE on the search stage for every new structure that declares knobs (ml-evolve)."""

    enabled: bool = True
    trials: int = Field(default=12, ge=1, le=1000)  # new trials per structure (its defaults come first)
    startup: int = Field(default=5, ge=0)  # TPE's n_startup_trials: random trials before TPE
    parallel: int = Field(default=2, ge=1, le=64)  # trials of one study at once (constant_liar above 1)


class RoundsConfig(_Section):
    """A round: this many finished candidates (None: one per plan slot). Plan and promotion run
    every K rounds."""

    size: int | None = Field(default=None, ge=1)


class PlanConfig(_Section):
    """The plan agent: hypothesis branches in slots, re-planned every `every` rounds."""

    enabled: bool | None = None  # None: on for staged tasks (a pilot stage), off otherwise
    slots: int = Field(default=3, ge=1, le=32)
    every: int = Field(default=3, ge=1)
    stall_rounds: int = Field(default=4, ge=1)  # kill: rounds without improving the branch's best
    max_invalid_rate: float = Field(default=0.6, ge=0, le=1)  # kill: share of failed candidates
    min_candidates: int = Field(default=3, ge=1)  # no kill before this many candidates


class PromotionConfig(_Section):
    """Every `every` rounds, the top-K pilot candidates are re-evaluated at `full` (staged tasks)."""

    every: int = Field(default=3, ge=1)
    top_k: int = Field(default=3, ge=1, le=100)
    final_top: int = Field(default=3, ge=0, le=100)  # report: the best this many at full get `final`


class TrackingConfig(_Section):
    """MLflow tracking; the default store is sqlite in the workspace."""

    mlflow: bool = True
    tracking_uri: str | None = None
    experiment: str | None = None
    # a finished run's winner as a new version in MLflow's Prompt Registry (text, playbook) or
    # Model Registry (an ML task), alias evoforge-best when it is better; needs mlflow: true
    registry: bool = True


class CognitionConfig(_Section):
    """The cognition base of prior knowledge (``<workspace>/cognition/`` unless `uri` names another):
    where it is, which other bases a run reads, embeddings and retrieval."""

    enabled: bool = True
    # the base runs read and write lessons to: a folder (a shared one for a team: runs of several
    # processes and machines write it at once) or a LanceDB URI (s3://, gs://, az://); none: the workspace's
    uri: str | None = None
    # more bases a run reads, never writes (e.g. the team's, while its own lessons stay in `uri`)
    read_uris: list[str] = Field(default_factory=list)
    person: str | None = None  # who the items a run or an ingest writes come from; none: the login name
    # onnx: all-MiniLM-L6-v2 on onnxruntime (no torch); minilm: the same model on torch (the embed
    # extra); openai: an embeddings endpoint; lexical: a weak fallback that warns
    embedding: Literal["onnx", "minilm", "openai", "lexical"] = "onnx"
    embedding_base_url: HttpURL | None = None  # openai: the endpoint; None: OPENAI_BASE_URL or OpenAI's
    # openai: environment variable holding the endpoint's key; none: OPENAI_API_KEY when
    # embedding_base_url is unset, else no key
    embedding_api_key_env: str | None = None
    # openai: model name; minilm: a local sentence-transformers folder; onnx: a folder with model.onnx
    # and tokenizer.json (a BERT-style model, mean pooled)
    embedding_model: str | None = None
    top_k: int = Field(default=5, ge=1, le=100)
    min_similarity: float = Field(default=0.25, ge=-1, le=1)  # cosine below this is not retrieved
    dedupe_similarity: float = Field(default=0.9, gt=0, le=1)  # a lesson this close to an item is dropped


class RunConfig(_Section):
    """Everything a run reads."""

    seed: int = 0
    workspace: str = "evoforge-runs"
    llm: LLMConfig = LLMConfig()
    budget: BudgetConfig = BudgetConfig()
    engine: EngineConfig = EngineConfig()
    search: SearchConfig = SearchConfig()
    staleness: StalenessConfig = StalenessConfig()
    speculation: SpeculationConfig = SpeculationConfig()
    adaptive: AdaptiveConfig = AdaptiveConfig()
    sandbox: SandboxConfig = SandboxConfig()
    analyze: AnalyzeConfig = AnalyzeConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    task_model: TaskModelConfig = TaskModelConfig()
    gepa: GepaConfig = GepaConfig()
    ace: AceConfig = AceConfig()
    judge: JudgeConfig = JudgeConfig()
    guard: GuardConfig = GuardConfig()
    param_search: ParamSearchConfig = ParamSearchConfig()
    rounds: RoundsConfig = RoundsConfig()
    plan: PlanConfig = PlanConfig()
    promotion: PromotionConfig = PromotionConfig()
    tracking: TrackingConfig = TrackingConfig()
    cognition: CognitionConfig = CognitionConfig()

    @model_validator(mode="after")
    def _embedding_novelty_needs_cognition(self) -> RunConfig:
        if self.search.novelty_backend == "embedding" and not self.cognition.enabled:
            raise ValueError("search.novelty_backend: embedding uses the cognition base's embedder: "
                             "set cognition.enabled: true")
        return self

    def public_dict(self) -> dict[str, Any]:
        """The config as saved with a run: secrets are never part of a dump."""
        return self.model_dump(mode="json")
