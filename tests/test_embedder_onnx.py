"""The default embedder: all-MiniLM-L6-v2 as int8 ONNX on onnxruntime, no torch; it embeds meaning,
is recorded in the cognition base, is chosen by default, and shares its space with the torch model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evoforge.cognition import CognitionBase, CognitionItem, LexicalEmbedder, MiniLMEmbedder, OnnxEmbedder
from evoforge.cognition import minilm as minilm_module
from evoforge.cognition import onnx_embedder as onnx_module
from evoforge.cognition.embeddings import make_embedder
from evoforge.cognition.errors import CognitionError
from evoforge.evaluators.task import load_task
from evoforge.flows.prepare import open_cognition
from evoforge.infra.config import CognitionConfig
from evoforge.infra.config_load import load_config

# (query, its paraphrase sharing no content word, an unrelated sentence sharing none either)
TRIPLES = [
    ("place the discs on a hexagonal grid", "Start from a honeycomb lattice arrangement",
     "Email digests arrive every morning at nine"),
    ("reduce the step size once held-out error plateaus",
     "Lower the learning rate when the validation loss stops improving",
     "Shipping labels are printed by the warehouse"),
    ("memoise costly calls so work is not repeated",
     "Cache expensive function results to avoid recomputation", "The cat sleeps on a warm windowsill"),
    ("big discs go toward the centre", "Large circles should sit in the middle",
     "Invoices are paid within thirty days"),
]
MARGIN = 0.3  # measured: the ONNX model's smallest gap is 0.37, the lexical fallback's largest 0.15


@pytest.fixture(scope="module")
def onnx() -> OnnxEmbedder:
    return OnnxEmbedder()


def _gaps(embedder) -> list[float]:
    gaps = []
    for query, paraphrase, unrelated in TRIPLES:
        rows = embedder.embed([query, paraphrase, unrelated])
        gaps.append(float(rows[0] @ rows[1] - rows[0] @ rows[2]))
    return gaps


def test_a_paraphrase_is_nearer_than_an_unrelated_sentence_by_meaning_not_words(onnx):
    assert min(_gaps(onnx)) >= MARGIN
    # the check tells meaning from word overlap: the lexical fallback (and so a random one) fails it
    assert min(_gaps(LexicalEmbedder())) < MARGIN


def test_vectors_are_384_d_unit_rows_in_the_order_given(onnx):
    texts = ["a short one", "a much longer sentence about circles packed in a unit square", "mid length text"]
    rows = onnx.embed(texts)
    assert rows.shape == (3, 384) and rows.dtype == np.float32 and onnx.dim == 384
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    alone = np.stack([onnx.embed([text])[0] for text in texts])  # batched and padded vs one at a time
    assert np.all((rows * alone).sum(axis=1) > 0.999)
    assert onnx.embed([]).shape == (0, 384)


def test_its_vectors_are_the_torch_models_and_their_bases_open_with_either(onnx, tmp_path):
    torch_model = MiniLMEmbedder()
    texts = [text for triple in TRIPLES for text in triple]
    cosines = (onnx.embed(texts) * torch_model.embed(texts)).sum(axis=1)
    assert cosines.min() > 0.999
    built = CognitionBase(tmp_path / "a", onnx)
    built.add([CognitionItem.create("", text) for _, text, _ in TRIPLES])
    hits = CognitionBase(built.folder, torch_model).search(TRIPLES[0][0], k=1)
    assert hits[0][0].text == TRIPLES[0][1]
    other = CognitionBase(tmp_path / "b", torch_model)
    other.add([CognitionItem.create("", text) for _, text, _ in TRIPLES])
    assert CognitionBase(other.folder, onnx).search(TRIPLES[3][0], k=1)[0][0].text == TRIPLES[3][1]


def test_the_base_records_its_name_and_dimension_and_refuses_another_space(onnx, tmp_path):
    base = CognitionBase(tmp_path, onnx)
    base.add([CognitionItem.create("Lattice", "Start from a honeycomb lattice arrangement")])
    meta = json.loads((tmp_path / "cognition.json").read_text())
    assert meta["embedder"] == "onnx:all-MiniLM-L6-v2-int8" and meta["dim"] == 384
    with pytest.raises(CognitionError, match="built with embedder 'onnx:all-MiniLM-L6-v2-int8' \\(384-d\\), "
                                             "not 'lexical fallback"):
        CognitionBase(tmp_path, LexicalEmbedder())
    lexical = CognitionBase(tmp_path / "lexical", LexicalEmbedder())
    lexical.add([CognitionItem.create("", "words only")])
    with pytest.raises(CognitionError, match="built with embedder 'lexical fallback.*not 'onnx:all-MiniLM"):
        CognitionBase(lexical.folder, onnx)


def test_the_default_on_a_plain_install_is_the_onnx_model(monkeypatch, tmp_path, capsys):
    real = minilm_module.find_spec  # a plain install: no sentence_transformers, no torch
    monkeypatch.setattr(minilm_module, "find_spec",
                        lambda name: None if name in ("sentence_transformers", "torch") else real(name))
    assert isinstance(make_embedder(CognitionConfig()), OnnxEmbedder)
    base = open_cognition(load_config(environ={}), tmp_path, load_task("circle_packing"))
    assert base is not None and base.embedder.name == "onnx:all-MiniLM-L6-v2-int8"
    assert base.count() > 0 and base.search("a hexagonal arrangement of the circles", k=1)
    assert "cognition base off" not in capsys.readouterr().err


def test_without_its_packages_the_default_run_goes_on_without_cognition_said_once(tmp_path, monkeypatch,
                                                                                   capsys):
    real = onnx_module.find_spec
    monkeypatch.setattr(onnx_module, "find_spec", lambda name: None if name == "onnxruntime" else real(name))
    cfg = load_config(environ={})
    assert open_cognition(cfg, tmp_path, load_task("circle_packing")) is None
    assert not cfg.cognition.enabled
    err = capsys.readouterr().err
    assert err.count("cognition base off") == 1 and "embedding: onnx needs onnxruntime" in err
    explicit = tmp_path / "c.yaml"
    explicit.write_text("cognition:\n  embedding: onnx\n")
    with pytest.raises(CognitionError, match="embedding: onnx needs onnxruntime"):
        open_cognition(load_config(explicit, environ={}), tmp_path, load_task("circle_packing"))


def test_another_onnx_model_folder_must_hold_its_model_and_tokenizer(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(CognitionError, match="no tokenizer.json in it"):
        make_embedder(CognitionConfig(embedding="onnx", embedding_model=str(tmp_path)))
