"""Proposals that did not beat their parent, remembered per parent so they are not proposed again
(GEPA #379): filled by a sink from the head's events (and from the node database on resume), read
by the stage that writes the next prompt for that parent.

    >>> memory = Rejections(limit=2)
    >>> for text in ("shorter", "longer", "bolder"):
    ...     memory.add("p1", text)
    >>> memory.tried("p1"), memory.tried("p2")
    (['longer', 'bolder'], [])
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque


class Rejections:
    """The last `limit` rejected proposals' motivations of each parent; safe across threads."""

    def __init__(self, limit: int = 5) -> None:
        self._by_parent: dict[str, deque[str]] = defaultdict(lambda: deque(maxlen=limit))
        self._lock = threading.Lock()

    def add(self, parent_id: str, motivation: str) -> None:
        text = " ".join(motivation.split())[:300]
        with self._lock:
            if text and text not in self._by_parent[parent_id]:
                self._by_parent[parent_id].append(text)

    def tried(self, parent_id: str) -> list[str]:
        with self._lock:
            return list(self._by_parent.get(parent_id, ()))
