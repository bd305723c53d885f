"""The sections of report.md for a task scored by a task model: a text or playbook task's winners'
held-out `test` scores beside their val scores, and what the run's task-model calls cost.

The test scores come from the final report's own table (`NodeStore.final_scores`), read here and
nowhere that selects; the usage is `status.json`'s `task_model`, as the run counted it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import FinalScore

# status.json's task_model keys, as the report names them (a key not listed is shown by its name)
USAGE_LABELS = {"calls": "calls", "cached": "cached (served again, not paid)", "failed": "failed",
                "tokens_in": "tokens in", "tokens_out": "tokens out", "seconds": "seconds",
                "cost_usd": "dollars",
                "refused": "refused (over task_model.max_calls_per_eval)",
                "truncated": "cut off at task_model.max_tokens (scored as empty answers)"}


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def held_out_section(finals: Sequence[FinalScore], nodes: Mapping[str, Node]) -> list[str]:
    """The winners' test scores beside their val scores, in the order the search ranked them."""
    lines = ["## Test scores — held-out cases, evaluated once after the search", "",
             "The `promotion.final_top` best candidates by val score (the cases the search scored "
             "and selected on) were run once, after the search ended, on the task's `test` cases, "
             "which no candidate saw during the search. These scores were never used for selection. "
             "(A resumed run lists below its winners the earlier ones its further search overtook.)", ""]
    if not finals:
        return lines + ["No test evaluation ran (`promotion.final_top` is 0, the task has no test "
                        "cases, or the run stopped before the end of its search).", ""]
    lines += ["| rank | node | val | test | test cases | task-model calls (cached) |",
              "|---|---|---|---|---|---|"]
    for f in finals:
        n = nodes.get(f.node_id)
        test = _fmt(f.score) if f.error is None else f"failed: {f.error[:60]}"
        m = f.metrics
        calls = f"{int(m.get('task_model_calls', 0))} ({int(m.get('task_model_cached', 0))})"
        lines.append(f"| {f.rank} | `{f.node_id}` | {_fmt(n.score_full if n else None)} | {test} | "
                     f"{int(m.get('cases_scored', 0))} | {calls} |")
    return lines + [""]


def usage_section(usage: Mapping[str, float]) -> list[str]:
    """The run's usage of its task model, as status.json has it."""
    lines = ["## Task model", "",
             "Every call the run made to its task model (a text or playbook task's test evaluation "
             "included), counted apart from the proposer's, as `status.json` `task_model` has them "
             "(a resumed run: its last session's).", "",
             "| | |", "|---|---|"]
    lines += [f"| {USAGE_LABELS.get(key, key)} | {value} |" for key, value in usage.items()]  # as counted
    return lines + [""]
