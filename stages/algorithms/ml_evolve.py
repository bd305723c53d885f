"""ml-evolve: the roles of ml-evolve's multi-agent ML optimisation, alone.

The plan agent keeps hypothesis branches in slots (killed and re-planned every `plan.every`
rounds: stages/rounds/); the mutation agent (`research`, steered by its branch) changes the
EVOLVE block's structure and names numeric knobs without choosing their values; the param-search
agent (`param_search`: Optuna TPE, `param_search.trials` per structure) chooses them on the pilot
data; the top-K pilot candidates are promoted to `full` every `promotion.every` rounds (the
`promote` stage: items the round schedule makes, evaluated by that stage's pool), and the
winners evaluated once at `final` behind the leak barrier. No cognition base and no Analyzer
(ASI-Evolve's parts: `asi-evolve` runs these roles with them). For staged tasks only: a task
whose levels name no `pilot` is refused before the run starts.
"""

from __future__ import annotations

from evoforge.evaluators.task import Task
from evoforge.stages.algorithms.base import Algorithm
from evoforge.stages.debug import Debug
from evoforge.stages.engineer import Engineer
from evoforge.stages.param_search import ParamSearch
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.promote import Promote
from evoforge.stages.reflect import Reflect
from evoforge.stages.research import Research


class MlEvolve(Algorithm):
    """research (mutation agent) -> engineer (pilot) -> debug -> param_search -> head; the plan
    agent beside it as a round job; promote (its items made by the promotion rounds) and reflect
    on the side."""

    name = "ml-evolve"
    about = "ml-evolve: plan agent over branches, mutation agent, Optuna on knobs, pilot -> full -> final"
    kinds = ("program", "files")
    defaults = {"plan": {"enabled": True}, "cognition": {"enabled": False}, "analyze": {"enabled": False}}

    def pipeline(self) -> Pipeline:
        return Pipeline(line=(Research(), Engineer(), Debug(), ParamSearch()), side=(Reflect(), Promote()))

    def refuses(self, task: Task) -> str | None:
        if task.gated:
            return None
        return (f"{self.name} evolves staged tasks; task '{task.name}' declares no pilot level "
                f"(task.yaml levels: pilot, full, final; or use asi-evolve)")
