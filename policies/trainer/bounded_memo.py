"""A thread-safe map bounded by entry count and by weight (about the bytes an entry holds), the
least recently used dropped first: the one shape of the Trainer memos (effective jobs, their pod
groups, spec inputs found well typed).

A count alone does not bound memory: a client sending ``size`` different TrainJobs near the body
limit would have each memo hold hundreds of MB. So each entry is put with a weight (its key's
length: the spec inputs written out, which is what the entry is worked out from), the weights
together stay within ``budget``, and an entry heavier than ``largest`` is not remembered at all
(it is worked out again when asked again: no real TrainJob comes near it).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# Per memo, in weight (bytes of spec inputs written out; real TrainJobs have 0.5 to 2 KiB, so
# 512 of them weigh about 1 MiB). What an effective job and its pod groups hold in memory is 2 to
# 8 times its key's length (tracemalloc: 2 for a spec of one long string, 8 for one of many
# short env entries): at most about 32 MiB held through each of those two memos.
BUDGET = 4 * 2**20
LARGEST_SHARE = 8  # an entry weighing more than BUDGET // LARGEST_SHARE (512 KiB) is not remembered


class BoundedMemo(Generic[K, V]):
    def __init__(self, size: int, budget: int = BUDGET, largest: int | None = None) -> None:
        self._size = size
        self._budget = budget
        self._largest = budget // LARGEST_SHARE if largest is None else largest
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The entry's value, now the most recently used; None when there is none."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: K, value: V, weight: int = 0) -> None:
        """Remember ``value`` under ``key``, unless ``weight`` is over the largest an entry may
        weigh; then the least recently used entries go until count and weight fit again."""
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self._weight -= previous[1]
            if weight > self._largest:
                return
            self._entries[key] = (value, weight)
            self._weight += weight
            while len(self._entries) > self._size or self._weight > self._budget:
                self._weight -= self._entries.popitem(last=False)[1][1]

    @property
    def weight(self) -> int:
        """The entries' weights together."""
        return self._weight

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._weight = 0
