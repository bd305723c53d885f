"""The one error type of the cognition base."""

from __future__ import annotations


class CognitionError(Exception):
    """A cognition problem a user can fix (bad seed file, unknown id, missing extra); one line."""
