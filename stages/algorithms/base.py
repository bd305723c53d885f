"""The algorithm contract: which stages make up a run, which artifact kinds it evolves, and the
config it sets unless the user did.

An algorithm is one module holding one `Algorithm` subclass (docs/extend/algorithm.md,
"Write an algorithm"); the engine, the sinks and the samplers never ask which one is running:

    >>> from evoforge.infra.config import RunConfig
    >>> from evoforge.stages.engineer import Engineer
    >>> from evoforge.stages.pipeline.pipeline import Pipeline
    >>> from evoforge.stages.research import Research
    >>> class ResearchOnly(Algorithm):
    ...     name, about, kinds = "research-only", "research, then evaluate", ("program",)
    ...     defaults = {"search": {"sampler": "uniform"}}
    ...     def pipeline(self):
    ...         return Pipeline((Research(), Engineer()))
    >>> algorithm = ResearchOnly()
    >>> algorithm.pipeline().names(), algorithm.evolves("text")
    (['research', 'engineer'], False)
    >>> algorithm.configure(RunConfig()).search.sampler  # its default, where the user set none
    'uniform'
    >>> algorithm.configure(RunConfig.model_validate({"search": {"sampler": "ucb1"}})).search.sampler
    'ucb1'
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from evoforge.evaluators.task import Task
from evoforge.infra.artifacts import KINDS
from evoforge.infra.config import RunConfig
from evoforge.stages.pipeline.pipeline import Pipeline


class AlgorithmError(ValueError):
    """An algorithm that cannot be found, loaded or applied (one line naming it)."""


class Algorithm(ABC):
    """One algorithm. Subclasses set `name`, `about` and `kinds`, and implement `pipeline`.

    `kinds`: the artifact kinds it evolves (infra/artifacts/: program, files, text, playbook); a
    task of another kind is refused before the run starts. `defaults`: config values, as nested
    sections (`{"search": {"sampler": "pareto"}}`), that the run takes unless the user set that
    key (config file, environment, flag).
    """

    name: ClassVar[str]
    about: ClassVar[str]  # one line, for `evoforge algorithms`
    kinds: ClassVar[tuple[str, ...]]
    defaults: ClassVar[Mapping[str, Any]] = {}

    @abstractmethod
    def pipeline(self) -> Pipeline:
        """The run's stages: the main line in order, and the side stages."""

    def evolves(self, kind: str) -> bool:
        """Whether a task of artifact kind `kind` can be evolved by this algorithm."""
        return kind in self.kinds

    def refuses(self, task: Task) -> str | None:
        """Why this algorithm cannot evolve `task` beyond its kind (a staged task required, say),
        in one line; None when it can."""
        return None

    def configure(self, cfg: RunConfig) -> RunConfig:
        """A copy of `cfg` with this algorithm's defaults for every key the user did not set."""
        filled = cfg.model_copy(deep=True)
        try:
            _fill(filled, self.defaults)
        except (KeyError, ValueError) as exc:
            raise AlgorithmError(f"algorithm {self.name}: defaults: {exc.args[0]}") from None
        return filled

    @classmethod
    def check(cls, where: str) -> None:
        """Refuse a class that is not a complete algorithm (a plug-in file's), naming `where`."""
        for attr in ("name", "about", "kinds"):
            if not hasattr(cls, attr):
                raise AlgorithmError(f"{where}: {cls.__name__} sets no {attr}")
        unknown = [kind for kind in cls.kinds if kind not in KINDS]
        if unknown or not cls.kinds:
            said = f"'{unknown[0]}' is not an artifact kind" if unknown else "names no kind"
            raise AlgorithmError(f"{where}: {cls.__name__}.kinds: {said} (kinds: {', '.join(KINDS)})")

    def __repr__(self) -> str:
        return f"<algorithm {self.name}>"


def _fill(model: BaseModel, defaults: Mapping[str, Any], prefix: str = "") -> None:
    """Set each default on `model` (in place, validated) unless the user set that key; a section's
    defaults go into the section, so that a user's other keys in it stay as they are."""
    for key, value in defaults.items():
        if key not in type(model).model_fields:
            raise KeyError(f"no config key '{prefix}{key}'")
        current = getattr(model, key)
        try:
            if isinstance(current, BaseModel) and isinstance(value, Mapping):
                _fill(current, value, f"{prefix}{key}.")
                setattr(model, key, current)  # the checks across sections, again
            elif key not in model.model_fields_set:
                setattr(model, key, value)  # validated: the sections validate assignments
        except ValidationError as exc:
            raise ValueError(f"{prefix}{key}: {exc.errors()[0]['msg']}") from None
