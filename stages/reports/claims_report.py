"""report.md's "Analyzer claims" section: the Analyzer's causal claims, how many counterfactual
runs checked, their verdicts, what checking cost, and a few examples."""

from __future__ import annotations

from collections.abc import Sequence

from evoforge.infra.nodes import Node
from evoforge.stages.population.claims import claims_of
from evoforge.stages.verify_data import VERDICTS

_EXAMPLES = 5


def claims_section(nodes: Sequence[Node]) -> list[str]:
    """The section's lines (none when the Analyzer made no claim in the run)."""
    datas = [(n, claims_of(n)) for n in nodes]
    made = [(n, c) for n, d in datas for c in d.claims]
    if not made and not any(d.unparsed for _, d in datas):
        return []
    counts = {v: sum(1 for _, c in made if c.get("verdict") == v) for v in VERDICTS}
    checked = len(made) - counts["unchecked"]
    evals = sum(d.evaluations for _, d in datas)
    seconds = sum(d.eval_s for _, d in datas)
    unread = sum(len(d.unparsed) for _, d in datas)
    lines = ["## Analyzer claims", "",
             "Each claim credits one hunk of a candidate's change with moving the score; a "
             "counterfactual run (the child without that hunk, or the parent with only it) tests it "
             "(`analyze.verify_share`).", "",
             f"- made: {len(made)} (claim lines that could not be read: {unread})",
             f"- checked: {checked}",
             *(f"- {v}: {counts[v]}" for v in VERDICTS),
             f"- counterfactual evaluations: {evals}, {seconds:.1f} evaluator seconds", ""]
    if not checked and not evals:
        lines[-1:] = ["", "None was checked: verification is off (`analyze.verify_share` 0) or the run "
                      "was too short to earn a check (each costs two evaluations or more, earned at "
                      "`verify_share` per candidate: 20 candidates at 0.1).", ""]
    shown = _examples([p for p in made if p[1].get("verdict") != "unchecked"])
    if shown:
        lines += ["| node | claim | verdict | effect ± se (n) | form |", "|---|---|---|---|---|"]
        lines += [_row(node, claim) for node, claim in shown]
        lines.append("")
    return lines


def _examples(checked: list[tuple[Node, dict[str, object]]]) -> list[tuple[Node, dict[str, object]]]:
    """A few checked claims, taking each verdict in turn so that every verdict shows."""
    by_verdict = [[p for p in checked if p[1].get("verdict") == v] for v in VERDICTS]
    out: list[tuple[Node, dict[str, object]]] = []
    for rank in range(_EXAMPLES):
        out += [group[rank] for group in by_verdict if rank < len(group)]
    return out[:_EXAMPLES]


def _row(node: Node, claim: dict[str, object]) -> str:
    effect, se = claim.get("effect"), claim.get("se")
    measured = (f"{effect:+.4g} ± {se:.2g} ({claim.get('n')})" if isinstance(effect, float)
                and isinstance(se, float) else str(claim.get("error", "-"))[:80])
    text = str(claim.get("text", "")).replace("|", "/")[:90]
    return f"| `{node.id}` | {text} | {claim.get('verdict')} | {measured} | {claim.get('form', '-')} |"
