"""The orchestrator's cheaper writes still record everything: MLflow candidate runs (one upload of
their text artifacts), lessons embedded once, node-database meta in one statement."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from mlflow.tracking import MlflowClient

from evoforge.cognition.entries import CognitionItem
from evoforge.cognition.lexical import LexicalEmbedder
from evoforge.cognition.store import CognitionBase
from evoforge.infra.nodes import Node
from evoforge.infra.nodestore import NodeStore
from evoforge.infra.tracking import ChildRun, Tracker


def test_every_candidate_run_keeps_its_metrics_params_and_text_artifacts(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "lean", tmp_path / "mlartifacts", "parent")
    parent = tracker.open()
    tracker.log_runs([(ChildRun(f"node-n{i}", {"node_id": f"n{i}", "island": i},
                                {"score_full": 0.25 * i, "eval_s": 1.5 + i}, {"node_id": f"n{i}"},
                                "FINISHED" if i else "FAILED",
                                {"program.py": f"x = {i}\n", "diff.txt": f"-x\n+x = {i}\n",
                                 "error.txt": "", "analysis.md": f"run {i} é"}), [], ())
                      for i in range(3)])
    tracker.terminate()
    client = MlflowClient(tracking_uri=uri)
    runs = {r.info.run_name: r for r in client.search_runs([r.info.experiment_id for r in
                                                            [client.get_run(parent)]],
                                                           f"tags.mlflow.parentRunId = '{parent}'")}
    assert sorted(runs) == ["node-n0", "node-n1", "node-n2"]
    for i in range(3):
        run = runs[f"node-n{i}"]
        assert run.data.metrics == {"score_full": 0.25 * i, "eval_s": 1.5 + i}
        assert run.data.params == {"node_id": f"n{i}", "island": str(i)}
        assert run.info.status == ("FINISHED" if i else "FAILED")
        files = {f.path for f in client.list_artifacts(run.info.run_id)}
        assert files == {"program.py", "diff.txt", "analysis.md"}  # the empty error.txt is left out
        local = Path(client.download_artifacts(run.info.run_id, "analysis.md", str(tmp_path / f"d{i}")))
        assert local.read_text(encoding="utf-8") == f"run {i} é"


class CountingEmbedder(LexicalEmbedder):
    """The lexical embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        return super().embed(texts)


def test_a_novel_lesson_is_embedded_once_and_a_batch_in_one_call(tmp_path: Path):
    embedder = CountingEmbedder()
    base = CognitionBase(tmp_path / "cognition", embedder)
    first = CognitionItem.create("Corners", "Put the largest circles in the corners first.", task="t")
    assert base.add_if_novel(first, 0.9) == first
    assert embedder.texts == 1  # checked for novelty and stored with the same vector
    lessons = [CognitionItem.create("Gaps", "Fill the gaps between circles with the smallest ones.",
                                    task="t"),
               CognitionItem.create("Corners", "Put the largest circles in the corners first.", task="t")]
    vectors = base.embed(lessons)
    added = [base.add_if_novel(lesson, 0.9, vector) for lesson, vector in zip(lessons, vectors, strict=True)]
    assert embedder.texts == 3  # two more, in one call
    assert added == [lessons[0], None]  # the repeat of the first lesson is not stored again
    hits = base.search("smallest circles in the gaps", k=1, task="t")
    assert [hit.id for hit, _ in hits] == [lessons[0].id]


def test_meta_keys_of_one_write_are_all_stored(tmp_path: Path):
    with NodeStore(tmp_path / "nodes.duckdb") as store:
        store.write([Node(id="a", run_id="r", code="x = 1\n")],
                    {"pool_version": 7, "case_order": {"c1": 2}, "note": "é"})
        store.write([], {"pool_version": 8})
        assert (store.get_meta("pool_version"), store.get_meta("case_order"), store.get_meta("note")) == \
            (8, {"c1": 2}, "é")
        assert store.get("a").code == "x = 1\n"
