"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint, through the openai SDK."""

from __future__ import annotations

import numpy as np
import openai

from evoforge.cognition.embedder import Embedder, unit_rows
from evoforge.cognition.errors import CognitionError
from evoforge.infra.llm.keys import NO_KEY

DEFAULT_MODEL = "text-embedding-3-small"
_BATCH = 256  # texts per request


class OpenAIEmbedder(Embedder):
    """Vectors from an embeddings endpoint; the API key given (none: no key, whatever the
    environment holds; infra/llm/keys.py `embedder_key` decides) goes to it and nowhere else.

    The dimension is the endpoint's: it is learnt from the first answer (or a one-text probe).
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.model = model or DEFAULT_MODEL
        self.base_url = base_url
        self.name = f"openai:{self.model}"
        self._keyless = not api_key
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or NO_KEY, timeout=timeout_s,
                                     max_retries=2)
        self._dim: int | None = None

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(base_url={self.base_url!r}, model={self.model!r})"

    @property
    def dim(self) -> int:
        """The endpoint's vector dimension (one probe request the first time it is asked)."""
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit rows in the input's order, requested in batches."""
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        parts = [self._request(texts[i:i + _BATCH]) for i in range(0, len(texts), _BATCH)]
        rows = unit_rows(np.concatenate(parts))
        if self._dim is not None and rows.shape[1] != self._dim:
            raise CognitionError(f"embedding endpoint {self._where()} changed dimension from "
                                 f"{self._dim} to {rows.shape[1]}")
        self._dim = rows.shape[1]
        return rows

    def _request(self, texts: list[str]) -> np.ndarray:
        try:
            answer = self._client.embeddings.create(model=self.model, input=texts, encoding_format="float")
        except openai.APIStatusError as exc:
            hint = (" (no key was sent: name its variable in cognition.embedding_api_key_env)"
                    if exc.status_code == 401 and self._keyless else "")
            raise CognitionError(f"embedding endpoint {self._where()} answered HTTP {exc.status_code} "
                                 f"for model {self.model}{hint}") from None
        except openai.APIConnectionError:
            raise CognitionError(f"embedding endpoint {self._where()} is unreachable") from None
        data = sorted(answer.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise CognitionError(f"embedding endpoint {self._where()} returned {len(data)} vectors "
                                 f"for {len(texts)} texts")
        return np.asarray([d.embedding for d in data], dtype=np.float32)

    def _where(self) -> str:
        return self.base_url or "(the openai SDK default)"
