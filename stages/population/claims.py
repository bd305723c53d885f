"""The Analyzer's claims on a node as the run counts them (status.json, report.md): the verify
stage's records when it looked at the node, else the claims as the Analyzer wrote them, each
unchecked (verification off, or the node never reached it)."""

from __future__ import annotations

from evoforge.infra.claims_format import parse_claims
from evoforge.infra.nodes import Node
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.verify_data import ClaimsData, claim_record


def claims_of(node: Node) -> ClaimsData:
    """The node's claims: the verify stage's records, or, where it never looked at the node
    (verification off), the Analyzer's claims as written, each unchecked."""
    data = ClaimsData.peek(node)
    lines = AnalysisData.peek(node).claims
    if data.claims or data.unparsed or not lines:
        return data
    parsed = parse_claims("\n".join(lines), True)  # (the direction does not change what is counted)
    return ClaimsData(claims=[claim_record(c) for c in parsed.claims], unparsed=list(parsed.unparsed))
