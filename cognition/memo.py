"""A small bounded memo (least recently used out first) that several threads may share."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Memo(Generic[V]):
    """Values by key, computed once while they stay among the `size` most recently used.

    >>> memo: Memo[int] = Memo(size=2)
    >>> calls = []
    >>> [memo.get(k, lambda k=k: calls.append(k) or len(k)) for k in ("ab", "ab", "abc")]
    [2, 2, 3]
    >>> calls, memo.hits, memo.misses
    (['ab', 'abc'], 1, 2)
    """

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value for `key`, computed (outside the lock: two threads may both compute it) when
        not held; exceptions of `compute` propagate and nothing is stored."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                self.hits += 1
                return self._values[key]
            self.misses += 1
        value = compute()
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.size:
                self._values.popitem(last=False)
        return value
