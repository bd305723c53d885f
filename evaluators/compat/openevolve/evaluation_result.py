"""OpenEvolve's evaluation result: numeric metrics plus free-form artifacts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EvaluationResult:
    """Metrics (numbers) and artifacts (text or bytes) returned by an OpenEvolve evaluator."""

    metrics: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, metrics: dict[str, Any]) -> EvaluationResult:
        """Wrap a plain metrics dict, as OpenEvolve does for old-style evaluators."""
        return cls(metrics=dict(metrics))

    def to_dict(self) -> dict[str, Any]:
        """The metrics alone, for callers that expect the old dict return."""
        return dict(self.metrics)

    def has_artifacts(self) -> bool:
        """True when any artifact is present."""
        return bool(self.artifacts)

    def get_artifact_keys(self) -> list[str]:
        """Names of the artifacts."""
        return list(self.artifacts)

    def get_artifact_size(self, key: str) -> int:
        """Size of one artifact in bytes (text measured as UTF-8)."""
        value = self.artifacts.get(key)
        if value is None:
            return 0
        if isinstance(value, bytes):
            return len(value)
        return len(str(value).encode("utf-8"))

    def get_total_artifact_size(self) -> int:
        """Total size of all artifacts in bytes."""
        return sum(self.get_artifact_size(key) for key in self.artifacts)
