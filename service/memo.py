"""A bounded memo shared by threads: the values of pure functions of their keys, the oldest dropped first."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(Generic[K, V]):
    """A read takes no lock (a dict's get is atomic); a write takes one, and past `capacity` drops the entries
    written first (a warm entry dropped is only computed again)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def put(self, key: K, value: V) -> V:
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.capacity:
                del self._entries[next(iter(self._entries))]
        return value
