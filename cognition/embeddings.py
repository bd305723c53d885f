"""Choose the embedding backend the config names (default: MiniLM on onnxruntime); the lexical
fallback only when asked for."""

from __future__ import annotations

from evoforge.cognition.embedder import Embedder
from evoforge.cognition.lexical import LexicalEmbedder
from evoforge.cognition.minilm import MiniLMEmbedder
from evoforge.cognition.onnx_embedder import OnnxEmbedder
from evoforge.cognition.openai_embedder import OpenAIEmbedder
from evoforge.infra.config import CognitionConfig
from evoforge.infra.llm.keys import embedder_key


def make_embedder(cfg: CognitionConfig) -> Embedder:
    """The embedder for ``cfg.embedding``; one whose packages are missing is a CognitionError, never
    a fallback.

    >>> make_embedder(CognitionConfig()).name
    'onnx:all-MiniLM-L6-v2-int8'
    >>> make_embedder(CognitionConfig(embedding="lexical")).name
    'lexical fallback (hashed word and character trigrams, no model)'
    """
    if cfg.embedding == "onnx":
        return OnnxEmbedder(cfg.embedding_model)
    if cfg.embedding == "minilm":
        return MiniLMEmbedder(cfg.embedding_model)
    if cfg.embedding == "openai":
        return OpenAIEmbedder(base_url=cfg.embedding_base_url, model=cfg.embedding_model,
                              api_key=embedder_key(cfg))  # its own key only
    return LexicalEmbedder()
