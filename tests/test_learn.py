"""The learn stage and what follows from it: retrieved knowledge in the research prompt, the
`Ideas used:` line and the origin rule, lessons written back with provenance, the report."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from evoforge.cognition.entries import CognitionItem
from evoforge.cognition.knowledge import Knowledge
from evoforge.cognition.lexical import LexicalEmbedder
from evoforge.cognition.store import CognitionBase
from evoforge.evaluators.sandbox import SandboxLimits
from evoforge.evaluators.task import load_task
from evoforge.infra.config import RunConfig
from evoforge.infra.nodes import EVALUATED, FAILED, Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.infra.runfiles import RunPaths
from evoforge.stages.learn import Learn
from evoforge.stages.pipeline.context import StageContext
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.population.stats import RunStats
from evoforge.stages.reports.origins import origin_breakdown, report_md
from evoforge.stages.research_prompt import ideas_used, origin_of, research_messages
from evoforge.stages.sample import make_sampler
from evoforge.stages.sinks.commit import Committer

TASK = load_task("circle_packing")
PRIORS = [
    CognitionItem.create("Hexagonal start", "Start the circles on a hexagonal lattice, then relax them.",
                         task="circle_packing", provenance="human seed: priors.md"),
    CognitionItem.create("Corner circles",
                         "Circles in the corners can be small; give the room to the middle.",
                         task="circle_packing", provenance="human seed: priors.md"),
    CognitionItem.create("Best fit", "Put each item in the bin it fills most.", task="bin_packing",
                         provenance="human seed: priors.md"),
]


def _context(tmp_path: Path, base: CognitionBase | None) -> tuple[StageContext, Node]:
    seed = Node(id="seed", run_id="r", code=TASK.initial_code, status=EVALUATED, score_full=1.0,
                origin="seed", analysis="The lattice start left big gaps near the corners.")
    pool = Pool()
    pool.add(seed)
    cfg = RunConfig.model_validate({"cognition": {"embedding": "lexical", "min_similarity": 0.05}})
    ctx = StageContext("r", TASK, cfg, OfflineBackend(), pool, make_sampler(cfg.search),
                       random.Random(0), SandboxLimits(), tmp_path, cognition=base)
    return ctx, seed


def test_learn_retrieves_for_the_parent_and_the_task_only(tmp_path):
    base = CognitionBase(tmp_path / "cognition", LexicalEmbedder())
    base.add(PRIORS)
    ctx, seed = _context(tmp_path, base)
    result = asyncio.run(Learn().run(Item(v_i=1, parent=seed), ctx))
    shown = result.updates["knowledge"]
    assert shown and all(isinstance(k, Knowledge) for k in shown)
    assert {k.title for k in shown} <= {"Hexagonal start", "Corner circles"}  # no bin-packing item
    assert result.node.cognition_ids == [k.id for k in shown] and result.node.parent_id == "seed"
    assert shown == sorted(shown, key=lambda k: -k.score) and all(k.score >= 0.05 for k in shown)


def test_without_a_cognition_base_learn_passes_the_item_on(tmp_path):
    ctx, seed = _context(tmp_path, None)
    result = asyncio.run(Learn().run(Item(v_i=1, parent=seed), ctx))
    assert result.updates == {} and result.node.cognition_ids == []


def test_the_prompt_labels_prior_knowledge_and_the_parent_analysis():
    seed = Node(id="seed", run_id="r", code=TASK.initial_code, status=EVALUATED, score_full=1.0,
                analysis="Corners are wasted.")
    knowledge = [Knowledge("a1", "Hexagonal start", "Use a lattice.", "human seed: x", 0.8),
                 Knowledge("b2", "Shrink corners", "Small corner circles.", "analyzer insight of node n",
                           0.6)]
    prompt = research_messages(TASK, seed, [], "diff", knowledge)[1]["content"]
    assert "## Prior knowledge (retrieved from the cognition base)" in prompt
    assert "### K1: Hexagonal start (human prior)" in prompt
    assert "### K2: Shrink corners (lesson learned in earlier experiments)" in prompt
    assert "Corners are wasted." in prompt and "Ideas used: K1, K3" in prompt
    assert prompt.index("Prior knowledge") < prompt.index("## Current program")


def test_ideas_used_are_cross_checked_and_decide_the_origin():
    knowledge = [Knowledge("a1", "t", "x", "human seed: p", 0.8),
                 Knowledge("b2", "t", "y", "analyzer insight of node n in run r", 0.6)]
    assert ideas_used("Ideas used: K2, K9, k1", knowledge) == ["b2", "a1"]  # K9 was not shown
    assert ideas_used("**Ideas used:** none", knowledge) == []
    assert origin_of(["a1"], knowledge, []) == "cognition"
    assert origin_of(["b2"], knowledge, []) == "experience"  # a lesson written back
    assert origin_of([], knowledge, ["node7"]) == "experience"  # another evaluated program
    assert origin_of([], knowledge, []) == "novel"


def test_lessons_are_written_back_once_with_their_provenance(tmp_path):
    base = CognitionBase(tmp_path / "cognition", LexicalEmbedder())
    base.add(PRIORS)
    pool = Pool()
    committer = Committer(NodeStore(tmp_path / "n.duckdb"), RunPaths(tmp_path), pool,
                          make_sampler(RunConfig().search), RunStats(), "circle_packing",
                          cognition=base, run_id="run1", dedupe_similarity=0.95)
    lesson = "Shrinking the four corner circles frees room for larger circles in the middle rows."
    first = Node(id="n1", run_id="run1", code="x", status=EVALUATED, score_full=1.2, lessons=[lesson])
    second = Node(id="n2", run_id="run1", code="y", status=FAILED, lessons=[lesson])
    for node in (first, second):
        slow = committer.slow_writes(Item(v_i=0, parent=node, node=node))
        slow.done(slow.work())
    stored = [i for i in base.list() if "corner circles frees" in i.text]
    assert len(stored) == 1 and stored[0].provenance == "analyzer insight of node n1 in run run1"
    assert first.artifacts["lessons_written"] == stored[0].id and "lessons_written" not in second.artifacts
    assert committer.lessons_written == 1
    assert committer.slow_writes(Item(v_i=0, parent=first, node=Node(id="n3", run_id="r", code=""))) is None


def test_the_report_gives_the_origin_breakdown_and_the_lessons():
    nodes = [Node(id="seed", run_id="r", code="s", origin="seed", status=EVALUATED, score_full=1.0)]
    origins = ["cognition"] * 5 + ["experience"] * 3 + ["novel"] * 2
    for i, origin in enumerate(origins):
        nodes.append(Node(id=f"n{i}", run_id="r", code=f"c{i}", origin=origin, status=EVALUATED,
                          score_full=2.0 - 0.1 * i))
    nodes[1].lessons = ["Lattice starts beat random ones."]
    from evoforge.cognition.entries import text_id

    nodes[1].artifacts["lessons_written"] = text_id(nodes[1].lessons[0])
    assert origin_breakdown(nodes[1:]) == {"cognition": 50.0, "experience": 30.0, "novel": 20.0}
    text = report_md("circle_packing", nodes, maximize=True)
    assert "| cognition | 50.0% | 100.0% |" in text  # the best design (n0) came from a prior
    assert "| novel | 20.0% | 0.0% |" in text
    assert "- Lattice starts beat random ones. (node `n0`)" in text
    assert "(1)" in text.split("Lessons written back")[1].splitlines()[0]


def test_without_the_embed_extra_the_default_run_goes_on_without_cognition(tmp_path, monkeypatch, capsys):
    import pytest

    from evoforge.cognition import minilm
    from evoforge.cognition.errors import CognitionError
    from evoforge.flows.prepare import open_cognition
    from evoforge.infra.config import load_config

    real = minilm.find_spec
    monkeypatch.setattr(minilm, "find_spec",
                        lambda name: None if name == "sentence_transformers" else real(name))
    assert open_cognition(load_config(environ={}), tmp_path, TASK) is None
    assert "cognition base off: embedding: minilm needs sentence_transformers" in capsys.readouterr().err
    explicit = tmp_path / "c.yaml"
    explicit.write_text("cognition:\n  embedding: minilm\n")
    with pytest.raises(CognitionError, match="pip install 'evoforge\\[embed\\]'"):
        open_cognition(load_config(explicit, environ={}), tmp_path, TASK)
