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
from evoforge.infra.llm.authorship import LESSONS_BY, LLM, OFFLINE, SIMULATED
from evoforge.infra.nodes import EVALUATED, FAILED, Node
from evoforge.infra.offline.backend import OfflineBackend
from evoforge.stages.analysis_data import AnalysisData
from evoforge.stages.learn import Learn, LearnData, retrieve
from evoforge.stages.pipeline.run_view import RunView
from evoforge.stages.population.item import Item
from evoforge.stages.population.pool import Pool
from evoforge.stages.reports.origins import origin_breakdown, report_md
from evoforge.stages.research_prompt import ideas_used, origin_of, research_messages
from evoforge.stages.sample import make_sampler
from evoforge.stages.sinks.base import Event, EventKind
from evoforge.stages.sinks.cognition_sink import CognitionWriteBack

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


def _context(tmp_path: Path, base: CognitionBase | None) -> tuple[RunView, Node]:
    seed = Node(id="seed", run_id="r", code=TASK.initial_code, status=EVALUATED, score_full=1.0,
                origin="seed",
                owned={"analyze": AnalysisData(report="The lattice start left big gaps near the corners.")})
    pool = Pool()
    pool.add(seed)
    cfg = RunConfig.model_validate({"cognition": {"embedding": "lexical", "min_similarity": 0.05}})
    ctx = RunView("r", TASK, cfg, OfflineBackend(), pool, make_sampler(cfg.search),
                       random.Random(0), SandboxLimits(), tmp_path, cognition=base)
    return ctx, seed


def test_learn_retrieves_for_the_parent_and_the_task_only(tmp_path):
    base = CognitionBase(tmp_path / "cognition", LexicalEmbedder())
    base.add(PRIORS)
    ctx, seed = _context(tmp_path, base)
    result = asyncio.run(Learn().run(Item(v_i=1, parent=seed), ctx))
    shown = result.updates.knowledge
    assert shown and all(isinstance(k, Knowledge) for k in shown)
    assert {k.title for k in shown} <= {"Hexagonal start", "Corner circles"}  # no bin-packing item
    assert LearnData.peek(result.node).cognition_ids == [k.id for k in shown]
    assert result.node.parent_id == "seed"
    assert shown == sorted(shown, key=lambda k: -k.score) and all(k.score >= 0.05 for k in shown)


def test_without_a_cognition_base_learn_passes_the_item_on(tmp_path):
    ctx, seed = _context(tmp_path, None)
    result = asyncio.run(Learn().run(Item(v_i=1, parent=seed), ctx))
    assert result.updates is None and LearnData.peek(result.node).cognition_ids == []


def test_the_prompt_labels_prior_knowledge_and_the_parent_analysis():
    seed = Node(id="seed", run_id="r", code=TASK.initial_code, status=EVALUATED, score_full=1.0,
                owned={"analyze": AnalysisData(report="Corners are wasted.")})
    knowledge = [Knowledge("a1", "Hexagonal start", "Use a lattice.", "human seed: x", 0.8),
                 Knowledge("b2", "Shrink corners", "Small corner circles.", "analyzer insight of node n",
                           0.6),
                 Knowledge("c3", "Grow the middle", "Big middle circle.", "analyzer insight of node m",
                           0.5, "confirmed"),
                 Knowledge("d4", "Box rule", "Leave no gap at a wall.", "ingested from spec.pdf, page 3",
                           0.4)]
    prompt = research_messages(TASK, seed, [], "diff", knowledge)[1]["content"]
    assert "## Prior knowledge (retrieved from the cognition base)" in prompt
    assert "### K1: Hexagonal start (human prior)" in prompt
    assert "### K2: Shrink corners (lesson learned in earlier experiments, not confirmed)" in prompt
    confirmed = "(lesson learned in earlier experiments, confirmed by a counterfactual run)"
    assert f"### K3: Grow the middle {confirmed}" in prompt
    assert "### K4: Box rule (human prior, from a document)" in prompt
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


def _lessons_node(node_id: str, lesson: str, by: str, status=EVALUATED) -> Node:
    return Node(id=node_id, run_id="run1", code=node_id, status=status, score_full=1.2,
                artifacts={LESSONS_BY: by}, owned={"analyze": AnalysisData(lessons=[lesson])})


def test_an_llms_lessons_are_written_back_once_with_their_provenance(tmp_path):
    base = CognitionBase(tmp_path / "cognition", LexicalEmbedder())
    base.add(PRIORS)
    run_base = CognitionBase(tmp_path / "run" / "cognition", LexicalEmbedder())
    sink = CognitionWriteBack(base, run_base, "run1", "circle_packing", dedupe_similarity=0.95)
    lesson = "Shrinking the four corner circles frees room for larger circles in the middle rows."
    first, second = _lessons_node("n1", lesson, LLM), _lessons_node("n2", lesson, LLM, status=FAILED)
    sink.record([Event(EventKind.FINISHED, first), Event(EventKind.FINISHED, second)])
    sink.record([Event(EventKind.FINISHED, Node(id="n3", run_id="r", code=""))])  # no lessons: nothing
    stored = [i for i in base.list() if "corner circles frees" in i.text]
    assert len(stored) == 1 and stored[0].provenance == "analyzer insight of node n1 in run run1"
    assert sink.written == {"shared": 1, "run": 0} and run_base.count() == 0
    sink.rebuild([first, second])  # a resume's catch-up writes nothing twice
    assert len([i for i in base.list() if "corner circles frees" in i.text]) == 1


def test_offline_and_simulated_lessons_stay_in_the_run_labelled_never_in_the_shared_base(tmp_path):
    base = CognitionBase(tmp_path / "cognition", LexicalEmbedder())
    base.add(PRIORS)
    before = base.count()
    run_base = CognitionBase(tmp_path / "run" / "cognition", LexicalEmbedder())
    sink = CognitionWriteBack(base, run_base, "run1", "circle_packing", dedupe_similarity=0.95)
    offline = _lessons_node("n1", "Offline: a larger first radius tends to help the packing.", OFFLINE)
    simulated = _lessons_node("n2", "Simulated: rotating the lattice by a few degrees fills gaps.", SIMULATED)
    sink.record([Event(EventKind.FINISHED, offline), Event(EventKind.FINISHED, simulated)])
    assert base.count() == before  # the workspace's base, which every later run reads: untouched
    kept = {i.text: i for i in run_base.list()}
    offline_lesson = AnalysisData.peek(offline).lessons[0]
    simulated_lesson = AnalysisData.peek(simulated).lessons[0]
    assert kept[offline_lesson].provenance == "offline analyzer lesson (no LLM) of node n1 in run run1"
    assert kept[simulated_lesson].provenance.startswith("LLM simulator lesson (simulated")
    assert "simulated" in kept[simulated_lesson].tags and "offline" in kept[offline_lesson].tags
    found = retrieve(base, run_base, "rotate the lattice to fill the gaps", 3, "circle_packing", -1.0)
    assert simulated_lesson in [shown.text for shown in found]  # this run's learn still finds it


def test_the_report_gives_the_origin_breakdown_and_the_lessons():
    nodes = [Node(id="seed", run_id="r", code="s", origin="seed", status=EVALUATED, score_full=1.0)]
    origins = ["cognition"] * 5 + ["experience"] * 3 + ["novel"] * 2
    for i, origin in enumerate(origins):
        nodes.append(Node(id=f"n{i}", run_id="r", code=f"c{i}", origin=origin, status=EVALUATED,
                          score_full=2.0 - 0.1 * i))
    AnalysisData.of(nodes[1]).lessons = ["Lattice starts beat random ones."]
    from evoforge.cognition.entries import text_id

    nodes[1].artifacts["lessons_written"] = text_id(AnalysisData.peek(nodes[1]).lessons[0])
    assert origin_breakdown(nodes[1:]) == {"cognition": 50.0, "experience": 30.0, "novel": 20.0}
    text = report_md("circle_packing", nodes, maximize=True)
    assert "| cognition | 50.0% | 100.0% |" in text  # the best design (n0) came from a prior
    assert "| novel | 20.0% | 0.0% |" in text
    assert "- Lattice starts beat random ones. (node `n0`)" in text
    assert "(1)" in text.split("Lessons written back")[1].splitlines()[0]
