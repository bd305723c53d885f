"""The Optuna study that tunes one structure's knobs, driven with ask/tell so the caller evaluates each trial.

The study lives in an sqlite file of the run folder, so a run killed mid-study resumes it: finished
trials are kept, trials left running are marked failed as interrupted, and only the rest are run.

>>> import asyncio, tempfile
>>> from evoforge.stages.tuning.param_space import parse_space
>>> space = parse_space('x = knob("x", 0.5, low=0.0, high=1.0)')
>>> async def evaluate(number, params):
...     return TrialOutcome(value=-(params["x"] - 0.3) ** 2)
>>> settings = StudySettings(trials=4, startup=2)
>>> with tempfile.TemporaryDirectory() as folder:
...     study = run_study(space, settings, f"sqlite:///{folder}/optuna.db", "demo", evaluate,
...                       default=TrialOutcome(value=-0.04))
...     result = asyncio.run(study)
>>> len(result.trials), result.ran_now, result.trials[0].source
(5, 4, 'default')
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import statistics
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import TPESampler
from optuna.storages import RDBStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, Trial, TrialState, create_trial

from evoforge.infra.node_data import NodeData
from evoforge.stages.tuning.param_space import ParamSpace

log = logging.getLogger("evoforge.param_search")

SOURCE_DEFAULT, SOURCE_TPE, SOURCE_RANDOM, SOURCE_RESUMED = "default", "tpe", "random", "resumed"
INTERRUPTED = "interrupted (the run stopped mid-trial)"
_FINISHED = (TrialState.COMPLETE, TrialState.FAIL)
_DIRECTIONS = ("maximize", "minimize")


@dataclass(frozen=True)
class StudySettings:
    """How many trials one structure gets, how many run at once, and which way is better."""

    trials: int = 12
    startup: int = 5
    parallel: int = 1
    seed: int = 0
    direction: str = "maximize"

    def __post_init__(self) -> None:
        if self.trials < 0 or self.startup < 0:
            raise ValueError(f"study trials and startup must be >= 0, got {self.trials} and {self.startup}")
        if self.parallel < 1:
            raise ValueError(f"study parallel must be >= 1, got {self.parallel}")
        if self.direction not in _DIRECTIONS:
            raise ValueError(f"study direction must be one of {_DIRECTIONS}, got {self.direction!r}")


@dataclass(frozen=True)
class TrialOutcome:
    """What the caller's evaluation of one trial returned; ``value`` None means the trial failed."""

    value: float | None
    error: str | None = None
    seconds: float = 0.0
    cpu_s: float | None = None


TrialEval = Callable[[int, dict[str, Any]], Awaitable[TrialOutcome]]


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial as stored in the study.

    ``source`` is "default" (the structure's declared values), "random" or "tpe" (how the sampler
    chose the values), or "resumed" (finished by an earlier, stopped call of ``run_study``).
    """

    number: int
    params: dict[str, Any]
    value: float | None
    state: str
    error: str | None
    seconds: float
    cpu_s: float | None
    source: str


@dataclass
class TuningData(NodeData, owner="param_search"):
    """What param search keeps on a node: the trials its study ran and how saturated it looked."""

    trials_run: int = 0  # Optuna trials evaluated for this structure (beyond its defaults)
    saturation: dict[str, float] = field(default_factory=dict)  # first/second-half best, spread


@dataclass(frozen=True)
class StudyResult:
    """The best values found, every finished trial in number order, and how saturated the search looks."""

    best_params: dict[str, Any]
    best_value: float | None
    trials: list[TrialRecord]
    ran_now: int
    saturation: dict[str, float | None]
    # trials_json's text, by node: the trials file and the MLflow sink share one build
    texts: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


def make_sampler(settings: StudySettings, resumed_trials: int = 0) -> TPESampler:
    """The TPE sampler of a study; a resumed study offsets the seed so it does not replay earlier draws."""
    return TPESampler(
        n_startup_trials=settings.startup,
        seed=settings.seed + resumed_trials,
        constant_liar=settings.parallel > 1,
    )


def open_study(settings: StudySettings, storage_url: str, study_name: str) -> optuna.Study:
    """Create the study in ``storage_url``, or load it when an earlier run created it."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = _storage(storage_url)
    study = optuna.create_study(
        storage=storage,
        sampler=make_sampler(settings, _stored_trials(storage, study_name)),
        study_name=study_name,
        direction=settings.direction,
        load_if_exists=True,
    )
    if study.direction != StudyDirection[settings.direction.upper()]:
        raise ValueError(
            f"study {study_name!r} in {storage_url} was created to {study.direction.name.lower()}, "
            f"not to {settings.direction}"
        )
    return study


async def run_study(
    space: ParamSpace,
    settings: StudySettings,
    storage_url: str,
    study_name: str,
    evaluate: TrialEval,
    default: TrialOutcome | None = None,
) -> StudyResult:
    """Run the study until ``settings.trials`` new trials have finished, resuming any earlier progress."""
    if not space:
        raise ValueError(f"run_study needs knobs to tune: study {study_name!r} has an empty parameter space")
    # the storage's reads and writes run in a thread: a stage must not hold the event loop
    study, earlier, done = await asyncio.to_thread(_prepare, space, settings, storage_url, study_name,
                                                   default)
    distributions = space.distributions()
    ran_now = await _run_trials(study, distributions, settings, evaluate, max(0, settings.trials - done))
    return await asyncio.to_thread(_result, study, space, settings.direction, earlier, ran_now)


def _prepare(space: ParamSpace, settings: StudySettings, storage_url: str, study_name: str,
             default: TrialOutcome | None) -> tuple[optuna.Study, set[int], int]:
    """Open the study, mark interrupted trials, store the defaults' once: (study, earlier, finished)."""
    study = open_study(settings, storage_url, study_name)
    _mark_interrupted(study)
    stored = study.get_trials(deepcopy=False)
    if default is not None and not any(_source(t) == SOURCE_DEFAULT for t in stored):
        study.add_trial(_default_trial(space, space.distributions(), default))
    earlier = {t.number for t in study.get_trials(deepcopy=False)}
    done = sum(_counts(t) for t in study.get_trials(deepcopy=False, states=_FINISHED))
    return study, earlier, done


def trials_json(result: StudyResult, node_id: str, space: ParamSpace) -> str:
    """The JSON text of ``param_trials/<node>.json``: the space, every trial, the best and the saturation
    (built once per study result: every sink that records it reads the same text)."""
    text = result.texts.get(node_id)
    if text is not None:
        return text
    payload = {
        "node": node_id,
        "space": [asdict(knob) for knob in space.knobs],
        "best": {"params": result.best_params, "value": result.best_value},
        "ran_now": result.ran_now,
        "saturation": result.saturation,
        "trials": [asdict(trial) for trial in result.trials],
    }
    result.texts[node_id] = text = json.dumps(payload, indent=2, allow_nan=False)
    return text


async def _run_trials(
    study: optuna.Study,
    distributions: dict[str, BaseDistribution],
    settings: StudySettings,
    evaluate: TrialEval,
    wanted: int,
) -> int:
    """Keep up to ``settings.parallel`` trials in flight, telling each as it ends, until ``wanted`` end."""
    finished = 0
    running: dict[asyncio.Task[TrialOutcome], Trial] = {}
    async with asyncio.TaskGroup() as group:
        while finished < wanted:
            room = min(settings.parallel - len(running), wanted - finished - len(running))
            # asked together in a thread (storage and TPE off the loop), started together
            for trial in await asyncio.to_thread(lambda n=room: [_ask(study, distributions, settings.startup)
                                                                 for _ in range(n)]):
                running[group.create_task(_evaluate(evaluate, trial.number, dict(trial.params)))] = trial
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: running[t].number):
                await asyncio.to_thread(_tell, study, running.pop(task), task.result())
                finished += 1
    return finished


def _ask(study: optuna.Study, distributions: dict[str, BaseDistribution], startup: int) -> Trial:
    # TPE samples at random while fewer than n_startup_trials trials are COMPLETE or PRUNED.
    completed = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
    trial = study.ask(fixed_distributions=distributions)
    trial.set_user_attr("source", SOURCE_RANDOM if completed < startup else SOURCE_TPE)
    return trial


async def _evaluate(evaluate: TrialEval, number: int, params: dict[str, Any]) -> TrialOutcome:
    start = time.monotonic()
    try:
        return await evaluate(number, params)
    except Exception as exc:  # recorded as a FAIL trial with this error (traceback in run.log)
        log.error("trial %d failed outside its evaluation:\n%s", number, traceback.format_exc())
        return TrialOutcome(
            value=None, error=f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - start
        )


def _checked(outcome: TrialOutcome) -> tuple[float | None, str | None]:
    """The value to tell (None fails the trial) and the error to record."""
    if outcome.value is None:
        return None, outcome.error or "the evaluation returned no value"
    value = float(outcome.value)
    if not math.isfinite(value):
        return None, outcome.error or f"the evaluation returned {value}"
    return value, outcome.error


def _attrs(outcome: TrialOutcome, error: str | None) -> dict[str, Any]:
    return {"seconds": outcome.seconds, "cpu_s": outcome.cpu_s, "error": error}


def _tell(study: optuna.Study, trial: Trial, outcome: TrialOutcome) -> None:
    value, error = _checked(outcome)
    for key, item in _attrs(outcome, error).items():
        trial.set_user_attr(key, item)
    if value is None:
        study.tell(trial, state=TrialState.FAIL)
    else:
        study.tell(trial, value)


def _default_trial(
    space: ParamSpace, distributions: dict[str, BaseDistribution], outcome: TrialOutcome
) -> FrozenTrial:
    value, error = _checked(outcome)
    return create_trial(
        state=TrialState.FAIL if value is None else TrialState.COMPLETE,
        value=value,
        params=space.defaults(),
        distributions=distributions,
        user_attrs={"source": SOURCE_DEFAULT, **_attrs(outcome, error)},
    )


@lru_cache(maxsize=8)
def _storage(url: str) -> RDBStorage:
    """One storage object per URL, shared by every study of the run (its engine opens once)."""
    return RDBStorage(url)


def study_name_of(node_id: str) -> str:
    """The name of a node's study in the run's Optuna storage."""
    return f"node-{node_id}"


def stored_default(storage_url: str, study_name: str) -> TrialOutcome | None:
    """The structure's defaults as an earlier session of the run evaluated them (the study's
    trial 0), or None when no study of that name holds a finished one: a resumed run reuses it
    instead of evaluating the defaults again."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = _storage(storage_url)
    try:
        study_id = storage.get_study_id_from_name(study_name)
    except KeyError:  # no study yet
        return None
    for trial in storage.get_all_trials(study_id, deepcopy=False, states=_FINISHED):
        if _source(trial) == SOURCE_DEFAULT:
            attrs = trial.user_attrs
            value = trial.value if trial.state == TrialState.COMPLETE else None
            return TrialOutcome(value, attrs.get("error"), float(attrs.get("seconds") or 0.0),
                                attrs.get("cpu_s"))
    return None


def stored_result(storage_url: str, study_name: str, space: ParamSpace, direction: str) -> StudyResult | None:
    """The study as stored (None when there is none): what a resumed run writes to a trials file
    a killed session left unwritten."""
    storage = _storage(storage_url)
    if _stored_trials(storage, study_name) == 0:
        return None
    study = optuna.load_study(study_name=study_name, storage=storage)
    return _result(study, space, direction, earlier=set(), ran_now=0)


def _stored_trials(storage: RDBStorage, study_name: str) -> int:
    try:
        study_id = storage.get_study_id_from_name(study_name)
    except KeyError:  # a new study
        return 0
    return storage.get_n_trials(study_id)


def _mark_interrupted(study: optuna.Study) -> None:
    """Fail the trials a stopped run left RUNNING, so that they are asked again."""
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial = Trial(study, frozen._trial_id)  # optuna keeps no public handle on a stored trial
        trial.set_user_attr("error", INTERRUPTED)
        study.tell(trial, state=TrialState.FAIL)


def _source(trial: FrozenTrial) -> str | None:
    return trial.user_attrs.get("source")


def _counts(trial: FrozenTrial) -> bool:
    """True for a finished trial that counts towards ``settings.trials``."""
    return _source(trial) != SOURCE_DEFAULT and trial.user_attrs.get("error") != INTERRUPTED


def _record(trial: FrozenTrial, earlier: set[int]) -> TrialRecord:
    attrs = trial.user_attrs
    source = _source(trial) or SOURCE_RESUMED
    if source != SOURCE_DEFAULT and trial.number in earlier:
        source = SOURCE_RESUMED
    return TrialRecord(
        number=trial.number,
        params=dict(trial.params),
        value=trial.value,
        state=trial.state.name,
        error=attrs.get("error"),
        seconds=float(attrs.get("seconds", 0.0)),
        cpu_s=attrs.get("cpu_s"),
        source=source,
    )


def _result(
    study: optuna.Study, space: ParamSpace, direction: str, earlier: set[int], ran_now: int
) -> StudyResult:
    finished = sorted(study.get_trials(deepcopy=False, states=_FINISHED), key=lambda t: t.number)
    records = [_record(t, earlier) for t in finished]
    completed = [r for r in records if r.state == TrialState.COMPLETE.name]
    pick = max if direction == "maximize" else min
    best = pick(completed, key=lambda r: r.value) if completed else None
    counted = [r for t, r in zip(finished, records, strict=True) if _counts(t)]
    return StudyResult(
        best_params=dict(best.params) if best else space.defaults(),
        best_value=best.value if best else None,
        trials=records,
        ran_now=ran_now,
        saturation=_saturation(counted, direction),
    )


def _saturation(counted: list[TrialRecord], direction: str) -> dict[str, float | None]:
    """Whether the second half of the new trials still beat the first half (None: no value to compare)."""
    pick = max if direction == "maximize" else min
    half = len(counted) // 2

    def best(records: list[TrialRecord]) -> float | None:
        values = [r.value for r in records if r.value is not None]
        return pick(values) if values else None

    first, second = best(counted[:half]), best(counted[half:])
    improved = second is not None and (first is None or pick(first, second) != first)
    values = [r.value for r in counted if r.value is not None]
    return {
        "first_half_best": first,
        "second_half_best": second,
        "improved": 1.0 if improved else 0.0,
        "spread": statistics.pstdev(values) if values else None,
        "completed": float(len(values)),
        "failed": float(len(counted) - len(values)),
    }
