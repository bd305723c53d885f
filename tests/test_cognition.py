"""The cognition base with the real MiniLM model: seeding, dedupe, meaning-based search, errors."""

from __future__ import annotations

import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from evoforge.cognition import (
    CognitionBase,
    CognitionError,
    CognitionItem,
    LexicalEmbedder,
    MiniLMEmbedder,
    OnnxEmbedder,
    make_embedder,
    open_base,
    read_seeds,
    task_seeds,
)
from evoforge.cognition import minilm as minilm_module
from evoforge.evaluators.task import builtin_tasks_dir
from evoforge.infra.config import CognitionConfig

# (stored text, query): the query shares no content word with the text, only its meaning
PARAPHRASES = [
    ("Start from a honeycomb lattice arrangement", "place the discs on a hexagonal grid"),
    ("Large circles should sit in the middle", "big discs go toward the centre"),
    ("Prefer the bin that the item fills most tightly",
     "choose the container where the object leaves least slack"),
    ("Cache expensive function results to avoid recomputation",
     "memoise costly calls so work is not repeated"),
    ("Vectorise loops with numpy array operations", "replace python iteration by whole-matrix arithmetic"),
    ("Seed the random generator for reproducible results",
     "fix the rng state so reruns give identical output"),
    ("Stop early when the time budget is nearly used up", "quit before the deadline expires"),
]
_STOP = {"the", "a", "an", "of", "on", "for", "to", "from", "with", "any", "that", "in", "into", "each",
         "once", "are", "is", "and", "too", "whose", "where", "gives", "times", "keep", "most", "least"}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if w not in _STOP}


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    model = MiniLMEmbedder()
    model.embed(["warm up"])  # the model loads once for the whole module
    return model


@pytest.fixture
def base(tmp_path, embedder) -> CognitionBase:
    return CognitionBase(tmp_path / "cognition", embedder)


def _item(title: str, text: str, task: str | None = None) -> CognitionItem:
    return CognitionItem.create(title, text, task=task, provenance="test")


# ---------------------------------------------------------------- seeding


def test_markdown_seeds_are_one_item_per_heading_with_tags(tmp_path):
    path = tmp_path / "priors.md"
    path.write_text("# Priors for a task\n\n## Hexagonal start\nRows offset by half a step.\n"
                    "Tags: lattice, start\n\n## Multi-start\nTry many starts.\n\n```\n# not a heading\n```\n")
    items = read_seeds(path, task="circle_packing")
    assert [i.title for i in items] == ["Hexagonal start", "Multi-start"]
    assert items[0].text == "Rows offset by half a step." and items[0].tags == ["lattice", "start"]
    assert "# not a heading" in items[1].text
    assert all(i.task == "circle_packing" and i.provenance == "human seed: priors.md" for i in items)


@pytest.mark.parametrize(("content", "line", "words"), [
    ("Some intro text\n## Title\nbody\n", 1, "before the first heading"),
    ("## Title\nbody\n## Empty\n\n## Next\nbody\n", 3, "no text"),
    ("# Only a title\n", 1, "no text"),
])
def test_bad_markdown_names_the_file_and_line(tmp_path, content, line, words):
    path = tmp_path / "bad.md"
    path.write_text(content)
    with pytest.raises(CognitionError, match=rf"bad\.md:{line}: .*{words}"):
        read_seeds(path)


def test_jsonl_seeds_and_their_errors(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text('{"title": "Best fit", "text": "Fill the fullest bin.", "tags": ["bp"], '
                    '"source": "paper"}\n\n'
                    '{"title": "Exact fit", "text": "Zero room left wins.", "tags": "a, b"}\n')
    items = read_seeds(good, task="bin_packing")
    assert [(i.title, i.tags, i.source) for i in items] == [("Best fit", ["bp"], "paper"),
                                                           ("Exact fit", ["a", "b"], "good.jsonl")]
    for content, message in [('{"title": "t", "text": "x"}\n{oops\n', r"bad\.jsonl:2: not valid JSON"),
                             ('{"title": "t"}\n', r"bad\.jsonl:1: 'text' must be a non-empty string"),
                             ('{"title": "t", "text": "x", "colour": 1}\n',
                              r"bad\.jsonl:1: unknown key 'colour'"),
                             ('["t", "x"]\n', r"bad\.jsonl:1: each line must be a JSON object")]:
        (tmp_path / "bad.jsonl").write_text(content)
        with pytest.raises(CognitionError, match=message):
            read_seeds(tmp_path / "bad.jsonl")


def test_a_folder_reads_its_md_and_jsonl_files(tmp_path):
    (tmp_path / "b.jsonl").write_text('{"title": "J", "text": "from jsonl"}\n')
    (tmp_path / "a.md").write_text("## M\nfrom markdown\n")
    (tmp_path / "notes.txt").write_text("ignored")
    assert [i.title for i in read_seeds(tmp_path)] == ["M", "J"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CognitionError, match="no seed files"):
        read_seeds(empty)
    with pytest.raises(CognitionError, match="not '.txt'"):
        read_seeds(tmp_path / "notes.txt")
    with pytest.raises(CognitionError, match="not found"):
        read_seeds(tmp_path / "missing.md")


def test_the_builtin_tasks_carry_seed_knowledge():
    circles = task_seeds(builtin_tasks_dir() / "circle_packing", "circle_packing")
    bins = task_seeds(builtin_tasks_dir() / "bin_packing", "bin_packing")
    assert 12 <= len(circles) <= 20 and 8 <= len(bins) <= 12
    assert all(i.task == "circle_packing" and i.tags for i in circles)
    assert len({i.id for i in circles + bins}) == len(circles) + len(bins)
    assert task_seeds(builtin_tasks_dir(), "no_cognition_folder_here") == []


# ---------------------------------------------------------------- the store


def test_adding_the_same_text_twice_does_not_duplicate_it(base, embedder):
    first = base.add([_item("A", "Use a hexagonal start."), _item("B", "Try many starts.")])
    assert len(first) == 2
    again = base.add([_item("A again", "use a   HEXAGONAL start."), _item("C", "Shrink radii by 1e-9.")])
    assert [i.title for i in again] == ["C"] and base.count() == 3
    reopened = CognitionBase(base.folder, embedder)
    assert reopened.add([_item("B", "Try many starts.")]) == [] and reopened.count() == 3


def test_two_handles_on_one_folder_see_each_others_writes(base, embedder):
    other = CognitionBase(base.folder, embedder)  # opened before the table exists, as a CLI beside a run
    base.add([_item("a", "Written by the run.")])
    assert [i.text for i in other.list()] == ["Written by the run."]
    assert [i.text for i in other.add([_item("a", "Written by the run."), _item("b", "By the CLI.")])] == [
        "By the CLI."]
    assert base.count() == 2 and json.loads((base.folder / "cognition.json").read_text())["dim"] == 384


def test_paraphrases_with_no_shared_words_are_found_by_meaning(base):
    for text, query in PARAPHRASES:
        assert not _words(text) & _words(query), (text, query)
    base.add([_item("", text) for text, _ in PARAPHRASES])
    for text, query in PARAPHRASES:
        hits = base.search(query, k=3)
        assert hits[0][0].text == text, (query, [(h.text, round(s, 3)) for h, s in hits])
        assert hits[0][1] > hits[1][1] and -1.0 <= hits[-1][1] <= hits[0][1] <= 1.0


def test_search_scores_are_cosine_similarities_best_first(base, embedder):
    base.add([_item("", "Rows of circles offset by half a spacing."), _item("", "Exact fits close a bin.")])
    hits = base.search("Rows of circles offset by half a spacing.", k=5)
    assert len(hits) == 2 and hits[0][1] == pytest.approx(1.0, abs=1e-4)
    query, other = embedder.embed(["Rows of circles offset by half a spacing.", "Exact fits close a bin."])
    assert hits[1][1] == pytest.approx(float(np.dot(query, other)), abs=1e-4)
    assert base.search("Rows of circles", k=5, min_score=0.99) == []


def test_the_task_filter_keeps_that_tasks_items_and_taskless_ones(base):
    base.add([_item("c", "Circles go in the corners.", "circle_packing"),
              _item("b", "Bins should be filled tightly.", "bin_packing"),
              _item("g", "Always measure before optimising.")])
    tasks = {hit.task for hit, _ in base.search("corners", k=10, task="circle_packing")}
    assert tasks == {"circle_packing", None}
    assert {i.task for i in base.list(task="bin_packing")} == {"bin_packing", None}
    assert len(base.list()) == 3


def test_remove_and_get(base):
    (added,) = base.add([_item("t", "Something to forget.")])
    assert base.get(added.id) == added
    assert base.remove(added.id) is True
    assert base.get(added.id) is None and base.count() == 0
    assert base.remove(added.id) is False and base.remove("it's-no-id") is False


def test_a_lesson_close_to_a_stored_item_is_not_written_back(base):
    base.add([_item("hex", "Start from a hexagonal lattice of circles.")])
    assert base.add_if_novel(_item("hex2", "Begin with a hexagonal lattice of circles."), 0.9) is None
    novel = base.add_if_novel(_item("lp", "Radii for fixed centres come from a linear program."), 0.9)
    assert novel is not None and base.count() == 2


def test_an_empty_base_searches_and_lists_nothing(base):
    assert base.search("anything") == [] and base.list() == [] and base.count() == 0
    assert base.get("abc") is None


def test_opening_a_base_with_another_embedder_is_a_clear_error(base):
    base.add([_item("t", "Built with MiniLM.")])
    with pytest.raises(CognitionError, match="built with embedder 'sentence-transformers:all-MiniLM-L6-v2'"):
        CognitionBase(base.folder, LexicalEmbedder())


# ---------------------------------------------------------------- embedders and config


def test_minilm_vectors_are_384_d_unit_rows(embedder):
    rows = embedder.embed(["one", "two", "three"])
    assert rows.shape == (3, 384) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)


def test_searches_from_several_threads_at_once_agree_with_one_at_a_time(base):
    base.add([_item("", text) for text, _ in PARAPHRASES])
    queries = [query for _, query in PARAPHRASES] * 3
    alone = [base.search(q, k=2) for q in queries]
    with ThreadPoolExecutor(max_workers=6) as pool:
        together = list(pool.map(lambda q: base.search(q, k=2), queries))
    assert [[h.id for h, _ in hits] for hits in together] == [[h.id for h, _ in hits] for hits in alone]


def test_the_lexical_fallback_announces_itself_on_every_use(caplog, tmp_path):
    embedder = make_embedder(CognitionConfig(embedding="lexical"))
    assert "lexical fallback" in embedder.name
    with caplog.at_level(logging.WARNING, logger="evoforge.cognition"):
        embedder.embed(["a"])
        embedder.embed(["b", "c"])
    warnings = [r for r in caplog.records if r.name == "evoforge.cognition" and r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all("lexical fallback" in r.getMessage() for r in warnings)


def test_onnx_minilm_is_the_default_and_torch_minilm_never_falls_back_silently(monkeypatch):
    assert isinstance(make_embedder(CognitionConfig()), OnnxEmbedder)
    assert isinstance(make_embedder(CognitionConfig(embedding="minilm")), MiniLMEmbedder)
    monkeypatch.setattr(minilm_module, "find_spec", lambda name: None)
    with pytest.raises(CognitionError, match=r"pip install 'evoforge\[embed\]'"):
        make_embedder(CognitionConfig(embedding="minilm"))


def test_a_workspace_base_seeded_from_a_task_as_a_run_does(tmp_path, embedder):
    base = open_base(CognitionConfig(embedding="minilm"), tmp_path)
    assert base.folder == tmp_path / "cognition" and base.embedder.name == embedder.name
    seeds = task_seeds(builtin_tasks_dir() / "circle_packing", "circle_packing")
    assert len(base.add(seeds)) == len(seeds) and base.add(seeds) == []
    hits = base.search("compute the best radii with a linear program", k=1, task="circle_packing",
                       min_score=0.3)
    assert len(hits) == 1 and "linear program" in hits[0][0].title.lower()
    assert base.search("recipe for chocolate cake", k=5, task="circle_packing", min_score=0.3) == []
    assert base.search("compute the radii", k=5, task="bin_packing") == []
    lesson = CognitionItem.create("Jacobians", "Analytic constraint Jacobians made SLSQP ten times faster.",
                                  task="circle_packing", provenance="analyzer insight of node n1 in run r1")
    assert base.add_if_novel(lesson, 0.9) == lesson and base.add_if_novel(lesson, 0.9) is None
    assert base.get(lesson.id).provenance == "analyzer insight of node n1 in run r1"
