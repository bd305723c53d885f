"""Run counters, rebuilt from the node database on resume."""

from __future__ import annotations

from dataclasses import dataclass

from evoforge.infra.nodes import EVALUATED, FAILED, PROPOSED, Node


@dataclass
class RunStats:
    """What the run has done and spent so far, over every session of the run."""

    proposals: int = 0  # research answers received (used or not)
    evaluations: int = 0  # evaluations that ran (successful or failed)
    evaluated_ok: int = 0
    failed: int = 0  # failed nodes, at any stage
    failed_research: int = 0
    duplicates: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    llm_s: float = 0.0
    eval_s: float = 0.0

    def count(self, node: Node) -> None:
        """Add one finished node; the seed is an evaluation but not a proposal."""
        self.proposals += node.origin != "seed"
        self.tokens_in += node.tokens_in
        self.tokens_out += node.tokens_out
        self.llm_s += node.llm_s
        self.eval_s += node.eval_s
        if node.was_evaluated:
            self.evaluations += 1
        if node.status == EVALUATED:
            self.evaluated_ok += 1
        elif node.status == FAILED:
            self.failed += 1
            if node.failed_stage == "research":
                self.failed_research += 1
            elif not node.was_evaluated:
                self.duplicates += 1

    @classmethod
    def rebuild(cls, nodes: list[Node]) -> RunStats:
        stats = cls()
        for node in nodes:
            if node.status != PROPOSED:
                stats.count(node)
        return stats
