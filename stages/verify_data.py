"""What the verify stage keeps on a node: the Analyzer's causal claims about its change, each with
its verdict and the evidence a counterfactual run gave, and what checking them cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evoforge.cognition.entries import CONFIRMED, INCONCLUSIVE, REFUTED, UNCHECKED
from evoforge.infra.claims_format import Claim
from evoforge.infra.node_data import NodeData

VERDICTS = (CONFIRMED, REFUTED, INCONCLUSIVE, UNCHECKED)
REVERT, ONLY = "revert", "only"  # the counterfactual: the child without the hunk, the parent with only it


@dataclass
class ClaimsData(NodeData, owner="verify"):
    """The node's claims (one dict each: hunk, direction, magnitude, text, verdict, form, with and
    without scores, effect, se, n, error), the claim lines that could not be read, and the
    counterfactual evaluations spent on it, with their evaluator seconds."""

    claims: list[dict[str, Any]] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)
    evaluations: int = 0  # child reruns and counterfactual runs
    eval_s: float = 0.0
    noisy: bool | None = None  # what the child's rerun showed (None: not rerun)

    def verdict(self) -> str:
        """The node's verdict for its lessons: refuted if any claim was, else confirmed if any
        was, else inconclusive if any was, else unchecked ("" with no claims)."""
        found = {c.get("verdict", UNCHECKED) for c in self.claims}
        return next((v for v in (REFUTED, CONFIRMED, INCONCLUSIVE, UNCHECKED) if v in found), "")

    def checked(self) -> list[dict[str, Any]]:
        """The claims that got a verdict (confirmed, refuted or inconclusive)."""
        return [c for c in self.claims if c.get("verdict", UNCHECKED) != UNCHECKED]


def claim_record(claim: Claim, verdict: str = UNCHECKED, **evidence: Any) -> dict[str, Any]:
    """A claim as stored on the node: what it says, its verdict and the evidence."""
    record = {"hunk": claim.hunk, "direction": claim.direction, "magnitude": claim.magnitude,
              "text": claim.text, "verdict": verdict}
    record.update({k: v for k, v in evidence.items() if v is not None})
    return record

