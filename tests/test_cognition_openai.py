"""The OpenAI embedder over real HTTP, against the LLM simulator's /v1/embeddings."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from evoforge.cognition import CognitionBase, CognitionError, CognitionItem, OpenAIEmbedder, make_embedder
from evoforge.infra.config import CognitionConfig
from evoforge.infra.llm_sim.process import SimulatorProcess
from evoforge.infra.llm_sim.server import SimConfig


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with SimulatorProcess(SimConfig(median_s=0.01, sigma=0.1, seed=3)) as process:
        yield process


def test_embeddings_come_back_as_deterministic_unit_vectors(sim):
    embedder = OpenAIEmbedder(base_url=sim.base_url, model="sim-embed", api_key="sk-test-cognition")
    rows = embedder.embed(["alpha", "beta", "alpha"])
    assert rows.shape == (3, 384) and embedder.dim == 384 and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)
    assert np.array_equal(rows[0], rows[2]) and not np.allclose(rows[0], rows[1])
    stats = httpx.get(sim.base_url.removesuffix("/v1") + "/sim/stats").json()
    assert hashlib.sha256(b"sk-test-cognition").hexdigest()[:16] in stats["api_key_sha256"]
    assert stats["texts_embedded"] >= 3
    assert "sk-test" not in repr(embedder) and embedder.name == "openai:sim-embed"


def test_the_endpoint_serves_base64_and_rejects_bad_input(sim):
    url = sim.base_url + "/embeddings"
    plain = httpx.post(url, json={"input": "x", "model": "m"}).json()["data"][0]["embedding"]
    packed = httpx.post(url, json={"input": ["x"], "model": "m", "encoding_format": "base64"}).json()
    assert isinstance(packed["data"][0]["embedding"], str) and len(plain) == 384
    assert httpx.post(url, json={"input": [1, 2]}).status_code == 400
    assert len(httpx.post(url, json={"input": "x", "dimensions": 8}).json()["data"][0]["embedding"]) == 8


def test_a_cognition_base_over_the_endpoint(sim, tmp_path):
    cfg = CognitionConfig(embedding="openai", embedding_base_url=sim.base_url, embedding_model="sim-embed")
    base = CognitionBase(tmp_path, make_embedder(cfg))
    item = CognitionItem.create("Exact fit", "A zero gap closes the bin.", provenance="test")
    assert base.add([item]) == [item]
    (hit, score), = base.search("Exact fit\nA zero gap closes the bin.", k=1)
    assert hit.id == item.id and score == pytest.approx(1.0, abs=1e-5)


def test_an_unreachable_endpoint_is_one_clear_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = OpenAIEmbedder(base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=2)
    with pytest.raises(CognitionError, match="unreachable"):
        embedder.embed(["x"])
