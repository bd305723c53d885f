"""What the research stage keeps on a node: the inspirations it was shown and used, the knowledge
items its answer says it used, and the prompt parts left out to fit the LLM's context window."""

from __future__ import annotations

from dataclasses import dataclass, field

from evoforge.infra.node_data import NodeData


@dataclass
class ResearchData(NodeData, owner="research"):
    """The research prompt's inputs on one candidate and what its answer says it used."""

    inspiration_ids: list[str] = field(default_factory=list)  # the inspirations sampled for it
    inspirations_used: list[str] = field(default_factory=list)  # the ones the researcher says it used
    ideas_used: list[str] = field(default_factory=list)  # cognition items its answer says it used
    prompt_dropped: list[str] = field(default_factory=list)  # prompt parts left out to fit the window
