"""gepa: GEPA's reflective prompt evolution on the engine's asynchronous stages.

For each candidate: the parent is drawn from the per-case Pareto front of the validation scores
(`search.sampler: pareto`, this algorithm's default); `rollout` runs the parent on a minibatch of
`gepa.minibatch` train cases with the task model and shows the proposer what went wrong there
(and the proposals already rejected on this parent); `research` asks for a reflective edit;
`gate` runs the child on the same minibatch and rejects it unless it beats the parent; the
`engineer` validates a survivor on the val cases (speculation, case reordering and the staleness
policies apply as for any task). With `gepa.merge_every` N > 0, every Nth item is instead a merge
of its parent with another Pareto-front member (stages/merge.py), sent straight to the gate.
The stages run at once, so proposals do not wait for
validations (the synchronous GEPA loop is `engine.mode: sync`). For text and playbook tasks.
"""

from __future__ import annotations

from evoforge.stages.algorithms.base import Algorithm
from evoforge.stages.engineer import Engineer
from evoforge.stages.gate import Gate
from evoforge.stages.merge import Merge
from evoforge.stages.pipeline.pipeline import Pipeline
from evoforge.stages.population.rejections import Rejections
from evoforge.stages.reflect import Reflect
from evoforge.stages.research import Research
from evoforge.stages.rollout import Rollout


class Gepa(Algorithm):
    """[merge ->] rollout -> research -> gate -> engineer -> head; reflect on the side."""

    name = "gepa"
    about = "GEPA: Pareto parents, minibatch rollouts with feedback, a gate, then validation"
    kinds = ("text", "playbook")
    defaults = {"search": {"sampler": "pareto"}}

    def pipeline(self) -> Pipeline:
        rejections = Rejections()  # the gate's rejections, shown by the rollout on the same parent
        return Pipeline(line=(Merge(), Rollout(rejections), Research(), Gate(rejections), Engineer()),
                        side=(Reflect(),))
