"""One cognition base shared by many runs: two processes write lessons at once and every lesson is
there once, with the provenance of each run that wrote it; a base made before review statuses is
brought up to date; only accepted items that rest on no refuted claim are retrieved, confirmed
lessons before unconfirmed ones; a run reads a team's base and writes its own."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import lancedb
import numpy as np
import pyarrow as pa

from evoforge.cognition import CognitionBase, CognitionItem, LexicalEmbedder
from evoforge.cognition.embeddings import make_embedder
from evoforge.cognition.knowledge import Knowledge
from evoforge.infra.config import CognitionConfig
from evoforge.stages.learn import retrieve

ROOT = Path(__file__).resolve().parents[1]
BOTH = [  # lessons both runs arrive at, word for word
    "Shrinking the four corner circles frees room for larger circles in the middle rows.",
    "A hexagonal lattice packs equal circles more densely than a square grid.",
    "Clamp every radius at zero before summing, or one negative radius ruins the score.",
    "Start the optimiser from the best known layout instead of a random one.",
    "Moving one circle at a time converges slowly; move a whole row together.",
    "Evaluate the overlap penalty with a vectorised distance matrix, not nested loops.",
    "Circles touching the wall should be placed first, then fill the interior.",
    "A smaller learning rate late in the search polishes the last digits of the score.",
    "Symmetric layouts are easy to find but rarely the best for an odd count.",
    "Penalise overlaps quadratically so that small overlaps are still pushed apart.",
]
ONLY_A = [
    "Caching the parent's evaluation halves the time spent per candidate.",
    "Random restarts help when the score has been flat for many generations.",
    "Large structural edits break the program more often than small numeric ones.",
    "Timeouts usually come from an unbounded while loop in the refinement step.",
    "Keep the number of circles fixed: the evaluator rejects any other count.",
    "Sorting circles by radius before placing them reduces wasted gaps.",
    "Inspiration programs from another island bring back lost diversity.",
    "Logging intermediate scores inside the program slows evaluation noticeably.",
    "Using float32 instead of float64 loses precision in the overlap test.",
    "Greedy insertion followed by local jiggling beats pure gradient steps here.",
    "Keep the step size small near the optimum.",
]
ONLY_B = [
    "Jittering positions by a tiny amount escapes saddle points of the layout.",
    "Two nested optimisers double the runtime for almost no gain in score.",
    "A penalty weight that grows over time turns a soft constraint into a hard one.",
    "Memory errors came from building an n by n by n array of distances.",
    "The evaluator's validity check fails on circles exactly on the boundary.",
    "Prefer analytic gradients of the overlap term to finite differences.",
    "Seeding numpy's random generator makes failures reproducible across runs.",
    "Reducing the number of refinement iterations trades score for speed linearly.",
    "Packing big circles first and small ones last fills the corners well.",
    "Rotating the whole layout changes nothing: the square is symmetric.",
    "Keep the step size small near the optimum!!",  # the same lesson in other words: one item
]


def _writer(shared: Path, tmp: Path, run_id: str, person: str, lessons: list[str], start: Path):
    (tmp / f"{run_id}.json").write_text(json.dumps(lessons))
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "cognition_writer.py"), str(shared),
                             str(tmp / run_id), run_id, person, str(tmp / f"{run_id}.json"), str(start)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_two_runs_in_two_processes_write_one_base_without_loss(tmp_path):
    shared, start = tmp_path / "team-base", tmp_path / "go"
    a = _writer(shared, tmp_path, "runA", "ana", BOTH + ONLY_A, start)
    b = _writer(shared, tmp_path, "runB", "bo", ONLY_B + BOTH, start)
    time.sleep(3)  # both have loaded the embedder and wait for the start file
    start.touch()
    outs = [proc.communicate(timeout=300) for proc in (a, b)]
    assert [proc.returncode for proc in (a, b)] == [0, 0], [err[-2000:] for _, err in outs]
    base = CognitionBase(shared, make_embedder(CognitionConfig()))
    rows = lancedb.connect(shared).open_table("items").to_arrow().to_pylist()
    per_text = Counter(" ".join(row["text"].split()) for row in rows)
    assert not [text for text, n in per_text.items() if n > 1]  # every lesson once
    texts = set(per_text)
    assert set(BOTH + ONLY_A[:-1] + ONLY_B[:-1]) <= texts  # none lost
    assert len(texts & {ONLY_A[-1], ONLY_B[-1]}) == 1  # the reworded one: whichever came first
    assert len(rows) == len(BOTH) + len(ONLY_A) + len(ONLY_B) - 1  # the reworded one merged
    written = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert sum(w["shared"] for w in written) == len(rows)
    by_text = {item.text: item for item in base.list()}
    for lesson in BOTH:  # each run's arrival kept: both provenances, runs and people
        origins = base.origins_of(by_text[lesson].id)
        assert sorted((o.run_id, o.person) for o in origins) == [("runA", "ana"), ("runB", "bo")]
        assert all(o.provenance.startswith("analyzer insight of node run") for o in origins)
    step = by_text.get(ONLY_A[-1]) or by_text[ONLY_B[-1]]
    assert sorted(o.run_id for o in base.origins_of(step.id)) == ["runA", "runB"]


def _old_base(folder: Path) -> None:
    """A base as evoforge 0.2 wrote it: no review status, no verdict, no quote; cognition.json beside."""
    folder.mkdir(parents=True)
    embedder = LexicalEmbedder()
    texts = ["Put each item where it leaves the least room.", "Sort the items, biggest first."]
    vectors = embedder.embed([f"Rule {i}\n{t}" for i, t in enumerate(texts)])
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("title", pa.string()),
                        pa.field("text", pa.string()), pa.field("source", pa.string()),
                        pa.field("tags", pa.list_(pa.string())), pa.field("task", pa.string()),
                        pa.field("provenance", pa.string()), pa.field("created_at", pa.float64()),
                        pa.field("vector", pa.list_(pa.float32(), vectors.shape[1]))])
    items = [CognitionItem.create(f"Rule {i}", t, provenance="human seed: old.md")
             for i, t in enumerate(texts)]
    data = {name: [getattr(item, name) for item in items]
            for name in ("id", "title", "text", "source", "tags", "task", "provenance", "created_at")}
    data["vector"] = [list(map(float, v)) for v in vectors]
    lancedb.connect(folder).create_table("items", pa.Table.from_pydict(data, schema=schema))
    (folder / "cognition.json").write_text(json.dumps({"embedder": embedder.name, "dim": vectors.shape[1],
                                                       "table": "items"}))


def test_a_base_made_before_review_statuses_is_brought_up_to_date(tmp_path):
    _old_base(tmp_path / "old")
    base = CognitionBase(tmp_path / "old", LexicalEmbedder())
    assert [item.status for item in base.list()] == ["accepted", "accepted"]
    assert base.search("least room left", k=1)[0][0].title == "Rule 0"
    base.add([CognitionItem.create("New", "Fill the gaps with the smallest items.", status="pending")])
    assert [i.title for i in base.list(status="pending")] == ["New"]
    assert CognitionBase(tmp_path / "old", LexicalEmbedder()).count() == 3  # opens again, as it is


def test_only_accepted_items_and_no_refuted_lesson_are_retrieved_confirmed_first(tmp_path):
    base = CognitionBase(tmp_path / "b", LexicalEmbedder())
    text = "corner circles shrink to free room in the middle rows"
    base.add([
        CognitionItem.create("pending", f"{text} pending", status="pending"),
        CognitionItem.create("rejected", f"{text} rejected", status="rejected"),
        CognitionItem.create("refuted", f"{text} refuted", verdict="refuted", provenance="analyzer insight"),
        CognitionItem.create("unchecked", f"{text} unchecked", verdict="unchecked",
                             provenance="analyzer insight"),
        CognitionItem.create("confirmed", f"{text} confirmed indeed, measured twice, by counterfactual runs",
                             verdict="confirmed", provenance="analyzer insight"),
    ])
    found = retrieve(base, None, text, 5, "circle_packing", -1.0)
    assert [k.title for k in found] == ["confirmed", "unchecked"]  # confirmed first, though less alike
    scores = {k.title: k.score for k in found}
    assert scores["confirmed"] < scores["unchecked"]
    assert [k.title for k in retrieve(base, None, text, 1, "circle_packing", -1.0)] == ["confirmed"]
    assert {i.title for i, _ in base.search(text, k=5, statuses=None)} == {
        "pending", "rejected", "refuted", "unchecked", "confirmed"}


def test_a_run_reads_a_teams_base_and_writes_its_own(tmp_path):
    team = CognitionBase(tmp_path / "team", LexicalEmbedder())
    own = CognitionBase(tmp_path / "own", LexicalEmbedder())
    team.add([CognitionItem.create("Team rule", "Grow the middle circle, shrink the corners.",
                                   provenance="human seed: team.md")])
    own.add([CognitionItem.create("My lesson", "Corners shrink well when the middle grows.",
                                  provenance="analyzer insight", verdict="unchecked")])
    version = team.version()
    found = retrieve(own, None, "grow the middle, shrink corners", 5, "t", -1.0, reads=[team])
    assert sorted(k.title for k in found) == ["My lesson", "Team rule"]  # from both bases
    assert isinstance(found[0], Knowledge) and team.version() == version  # read, never written
    assert np.isfinite(found[0].score)


def test_the_cli_writes_the_base_at_cognition_uri_and_shows_where_an_item_came_from(tmp_path, capsys):
    from evoforge.evaluators.task import builtin_tasks_dir
    from evoforge.flows.cli import main

    team = tmp_path / "team"
    config = tmp_path / "c.yaml"
    config.write_text(f"cognition:\n  uri: {team}\n  person: ana\n  embedding: lexical\n")
    priors = builtin_tasks_dir() / "circle_packing" / "cognition" / "priors.md"
    workspace = str(tmp_path / "ws")
    assert main(["cognition", "add", str(priors), "--config", str(config), "--workspace", workspace]) == 0
    assert not (tmp_path / "ws" / "cognition").exists() and (team / "items.lance").is_dir()
    capsys.readouterr()
    assert main(["cognition", "list", "--status", "accepted", "--json", "--config", str(config)]) == 0
    items = json.loads(capsys.readouterr().out)
    assert len(items) >= 12 and {item["person"] for item in items} == {"ana"}
    assert main(["cognition", "list", "--status", "pending", "--config", str(config)]) == 0
    assert capsys.readouterr().out.startswith("no items")
    assert main(["cognition", "show", items[0]["id"], "--config", str(config)]) == 0
    shown = capsys.readouterr().out
    assert "status: accepted" in shown and "  - human seed: priors.md; task" not in shown
    assert "  - human seed: priors.md; by ana" in shown
    assert main(["cognition", "show", "nope", "--config", str(config)]) == 2
    assert "no cognition item with id 'nope'" in capsys.readouterr().err


def test_a_run_retrieves_from_the_teams_base_and_leaves_it_unwritten(tmp_path):
    from evoforge.flows.cli import main
    from evoforge.stages.learn import LearnData
    from tests.helpers import read_nodes

    team = CognitionBase(tmp_path / "team", make_embedder(CognitionConfig()))
    rule = CognitionItem.create("Team rule: corners", "Put small circles in the four corners of the square "
                                "and grow the circles of the middle rows.", provenance="human seed: team.md")
    team.add([rule])
    version = team.version()
    config = tmp_path / "c.yaml"
    config.write_text(f"cognition:\n  read_uris: [{tmp_path / 'team'}]\n  min_similarity: 0.0\n  top_k: 20\n")
    code = main(["run", "circle_packing", "--run-dir", str(tmp_path / "run"), "--workspace",
                 str(tmp_path / "ws"), "--config", str(config), "--max-evals", "4", "--quiet"])
    assert code == 0
    shown = [i for n in read_nodes(tmp_path / "run") for i in LearnData.peek(n).cognition_ids]
    assert rule.id in shown  # retrieved from the team's base
    assert team.version() == version and team.count() == 1  # never written
    own = CognitionBase(tmp_path / "ws" / "cognition", team.embedder)
    assert own.count() >= 12  # the task's seeds went to its own
