"""A mutated program and what changed: what every offline edit hands back."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutation:
    """A mutated program and a one-line account of what changed."""

    code: str
    description: str
