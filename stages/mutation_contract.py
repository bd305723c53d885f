"""What the research prompt adds for ML work (ml-evolve's division of labour): the research
branch the candidate belongs to, and the mutation agent's contract when the program declares
knobs — change the structure, declare the numbers, let Optuna choose them."""

from __future__ import annotations

from evoforge.infra.nodes import Node
from evoforge.stages.engineer_data import EngineerData
from evoforge.stages.rounds.branches import Branch
from evoforge.stages.tuning.param_study import TuningData

CONTRACT = """## Mutation agent contract
You change the structure (the model family, preprocessing, features, the recipe). Numbers are not
yours to choose: declare every tunable value as a knob, e.g.
`C = knob("C", 1.0, low=1e-3, high=1e3, log=True)`, `depth = knob("depth", 3, low=1, high=12)`,
`kind = knob("kind", "rbf", choices=["rbf", "poly"])` — name, default, range (log=True for scale
parameters) or choices. Optuna tunes the knobs on the pilot data after your change is evaluated,
so do not hard-code a value a knob owns; a candidate that does is flagged."""


def branch_section(branch: Branch | None) -> str | None:
    """The prompt section naming the candidate's research branch, or None outside a plan."""
    if branch is None:
        return None
    kill = branch.kill
    return (f"## Research branch {branch.id} (slot {branch.slot})\nHypothesis: {branch.hypothesis}\n"
            f"Stay within this hypothesis. The branch loses its slot after {kill.stall_rounds} rounds "
            f"without improving, or when more than {kill.max_invalid_rate:.0%} of its candidates fail.")


def tuned_line(node: Node) -> str | None:
    """What Optuna found for the node's knobs, or None when it has none."""
    if not node.params:
        return None
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in sorted(node.params.items()))
    score_default = EngineerData.peek(node).score_default
    default = "" if score_default is None else f"; with its defaults it scored {score_default:.6g}"
    trials = TuningData.peek(node).trials_run
    return f"Knob values behind its score (chosen by Optuna over {trials} trials): {shown}{default}"
