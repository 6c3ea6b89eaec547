"""The read-only view of cluster state that cluster-aware rules see.

Defined here, implemented in ``webhook`` by watch-backed caches, and in tests by
``StaticClusterView``. Objects are plain dicts in the Kubernetes JSON shape (camelCase keys),
exactly as the API server serves them. Nothing here may block or perform I/O.

What a view returns is a snapshot: never changed once returned, and the very same object on
every call until something in it changes (then a new one). Rules rely on this to derive data
from cluster state (parsed quotas, node capacities) once per change instead of once per
request: see ``SnapshotMemo``.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

Obj = Mapping[str, Any]
_V = TypeVar("_V")
CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"


class ClusterView(Protocol):
    @property
    def available(self) -> bool:
        """True once every cache has listed at least once and none is known to be stale."""
        ...

    @property
    def unavailable_reason(self) -> str:
        """Why ``available`` is False, in words an admin can act on ("" when available)."""
        ...

    def resource_quotas(self, namespace: str) -> Sequence[Obj]: ...

    def limit_ranges(self, namespace: str) -> Sequence[Obj]: ...

    def namespace(self, name: str) -> Obj | None: ...

    def nodes(self) -> Sequence[Obj]: ...

    def local_queues(self, namespace: str) -> Sequence[Obj] | None:
        """None when the Kueue LocalQueue CRD is not installed (so nothing can be said)."""
        ...

    def mpijobs(self, namespace: str) -> Sequence[Obj]: ...

    def training_runtime(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The Kubeflow Trainer runtime a TrainJob names: ``kind`` ClusterTrainingRuntime
        (``namespace`` ignored) or TrainingRuntime (in ``namespace``); None when not cached
        (not created yet, or the Trainer CRDs are not installed)."""
        ...

    def trainjobs(self, namespace: str) -> Sequence[Obj]:
        """The namespace's TrainJobs (none when the Trainer CRDs are not installed)."""
        ...


@dataclass(frozen=True)
class StaticClusterView:
    """An in-memory ClusterView: for unit tests, the offline checker and ``serve --dev``.

    Its objects and sequences are snapshots like any view's: give it new ones (a new view)
    rather than editing them in place, or rules may keep reading what they derived before."""

    quotas: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    ranges: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    namespaces: Mapping[str, Obj] = field(default_factory=dict)
    node_list: Sequence[Obj] = ()
    queues: Mapping[str, Sequence[Obj]] | None = None
    jobs: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    cluster_runtimes: Mapping[str, Obj] = field(default_factory=dict)  # ClusterTrainingRuntimes by name
    runtimes: Mapping[str, Mapping[str, Obj]] = field(default_factory=dict)  # TrainingRuntimes: namespace → name →
    train_jobs: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    available: bool = True
    unavailable_reason: str = ""

    def resource_quotas(self, namespace: str) -> Sequence[Obj]:
        return self.quotas.get(namespace, ())

    def limit_ranges(self, namespace: str) -> Sequence[Obj]:
        return self.ranges.get(namespace, ())

    def namespace(self, name: str) -> Obj | None:
        return self.namespaces.get(name)

    def nodes(self) -> Sequence[Obj]:
        return self.node_list

    def local_queues(self, namespace: str) -> Sequence[Obj] | None:
        if self.queues is None:
            return None
        return self.queues.get(namespace, ())

    def mpijobs(self, namespace: str) -> Sequence[Obj]:
        return self.jobs.get(namespace, ())

    def training_runtime(self, kind: str, namespace: str, name: str) -> Obj | None:
        if kind == CLUSTER_TRAINING_RUNTIME:
            return self.cluster_runtimes.get(name)
        return self.runtimes.get(namespace, {}).get(name)

    def trainjobs(self, namespace: str) -> Sequence[Obj]:
        return self.train_jobs.get(namespace, ())


class SnapshotMemo(Generic[_V]):
    """``derive(*snapshots)``, computed once per distinct combination of snapshot objects.

    Entries are found by the identity of the snapshots (they need not be hashable, and
    comparing them would cost what deriving saves). Each entry holds on to its snapshots, so
    their ids cannot be reused by other objects while it lives. Beyond ``size`` entries the
    oldest goes first: a cluster with more namespaces than that in use derives some of them
    again, as often as they change hands, never more than once per request.
    """

    def __init__(self, derive: Callable[..., _V], size: int = 1024) -> None:
        self._derive = derive
        self._size = size
        self._entries: dict[tuple[int, ...], tuple[tuple[object, ...], _V]] = {}
        self._lock = threading.Lock()  # writers only: request threads read without it

    def __call__(self, *snapshots: object) -> _V:
        key = tuple(map(id, snapshots))
        entry = self._entries.get(key)
        if entry is not None:
            return entry[1]  # its snapshots are alive, so they are the very objects asked about
        value = self._derive(*snapshots)
        with self._lock:
            while len(self._entries) >= self._size:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = (snapshots, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)


NO_CLUSTER = StaticClusterView(
    available=False, unavailable_reason="no cluster is configured (serving without a kubeconfig)"
)
