"""What the analyze stage keeps on a node: its report and lessons, who wrote the report (the LLM
or the deterministic summary) and, when the LLM bound, what made the candidate worth an LLM
analysis."""

from __future__ import annotations

from dataclasses import dataclass, field

from evoforge.infra.node_data import NodeData

BY_LLM, BY_OFFLINE, BY_SUMMARY = "llm", "offline", "summary"  # AnalysisData.by: who wrote the report


@dataclass
class AnalysisData(NodeData, owner="analyze"):
    """Who wrote the node's report (BY_LLM: an LLM endpoint, the simulator included; BY_OFFLINE:
    the offline analyzer, no LLM; BY_SUMMARY; or "": none, or the call failed) and why
    the LLM wrote it ("slack": the LLM had spare slots; else the candidate's worth, e.g. "new best")."""

    by: str = ""
    worth: str = ""
    report: str = ""  # the Analyzer's report: what changed, what happened, why, what next
    lessons: list[str] = field(default_factory=list)  # generalisable lessons, offered to the cognition base
    claims: list[str] = field(default_factory=list)  # its Claims lines, as written (verify reads them)
