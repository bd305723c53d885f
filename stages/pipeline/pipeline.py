"""The pipeline: a run's stages in order, as data (`evoforge stages` prints it).

The main line is written out in order by the algorithm (stages/algorithms/): an item enters at
the first stage the run uses and, unless a stage's result sends it elsewhere, goes on to the
next stage the run uses, and after the last one to the head (`COMMIT`). Side stages are reached
only when a stage sends an item there (reflect, from the engineer's door) and go on to their
`then`. A plug-in stage names the stage it follows (`after`) and is placed right behind it, after
any plug-in placed there before it.

    >>> from evoforge.stages.pipeline.stage import Stage
    >>> class S(Stage):
    ...     async def run(self, item, ctx): ...
    >>> A, B, C = (type(n, (S,), {"name": n}) for n in "abc")
    >>> P = type("p", (S,), {"name": "p", "after": "a"})
    >>> line = Pipeline((A(), B(), C())).with_plugins([P()])
    >>> line.names()
    ['a', 'p', 'b', 'c']
    >>> line.routes({"a", "p", "c"})
    {'a': 'p', 'p': 'c', 'c': 'commit'}
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from evoforge.stages.pipeline.stage import COMMIT, Stage


class PipelineError(ValueError):
    """A pipeline that cannot be built (one line naming the stage)."""


@dataclass(frozen=True)
class Pipeline:
    """The main line of stages in order, and the side stages reached only by routing."""

    line: tuple[Stage, ...]
    side: tuple[Stage, ...] = ()

    def __post_init__(self) -> None:
        names = [s.name for s in self.stages]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise PipelineError(f"two stages share the name '{twice[0]}'")
        for stage in self.side:
            if stage.then != COMMIT and stage.then not in names:
                raise PipelineError(f"stage '{stage.name}' goes on to '{stage.then}', which is not in "
                                    f"the pipeline")

    @property
    def stages(self) -> tuple[Stage, ...]:
        """Every stage: the main line in order, then the side stages."""
        return self.line + self.side

    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def get(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def with_plugins(self, plugins: Iterable[Stage]) -> Pipeline:
        """The pipeline with each plug-in placed right behind the stage it names (`after`)."""
        line = list(self.line)
        behind: dict[str, int] = {}  # anchor -> plug-ins placed behind it so far
        for plugin in plugins:
            if plugin.after is None:
                raise PipelineError(f"plug-in stage '{plugin.name}' must name the stage it follows "
                                    f"(after = one of {', '.join(s.name for s in line)})")
            anchors = [s.name for s in line]
            if plugin.after not in anchors:
                raise PipelineError(f"plug-in stage '{plugin.name}' goes after '{plugin.after}', which is "
                                    f"not in the pipeline ({', '.join(anchors)})")
            at = anchors.index(plugin.after) + 1 + behind.get(plugin.after, 0)
            behind[plugin.after] = behind.get(plugin.after, 0) + 1
            line.insert(at, plugin)
        return Pipeline(tuple(line), self.side)

    def routes(self, enabled: set[str]) -> dict[str, str]:
        """Where each enabled stage's results go by default: the next enabled stage of the main
        line (the head after the last); a side stage's `then`, or where it would have sent them."""
        routes: dict[str, str] = {}
        line = [s.name for s in self.line]
        for i, name in enumerate(line):
            if name in enabled:
                routes[name] = self._next_enabled(line[i + 1:], enabled)
        for stage in self.side:
            if stage.name in enabled:
                then = stage.then
                routes[stage.name] = (then if then == COMMIT or then in enabled
                                      else self._next_enabled(line[line.index(then) + 1:], enabled))
        return routes

    def entry(self, enabled: set[str]) -> Stage:
        """The first stage of the main line the run uses: where new items enter."""
        for stage in self.line:
            if stage.name in enabled:
                return stage
        raise PipelineError("the run uses no stage of the main line")

    @staticmethod
    def _next_enabled(rest: Sequence[str], enabled: set[str]) -> str:
        return next((name for name in rest if name in enabled), COMMIT)
