"""The read-only view of cluster state that cluster-aware rules see.

Defined here, implemented in ``webhook`` by watch-backed caches, and in tests by
``StaticClusterView``. Objects are plain dicts in the Kubernetes JSON shape (camelCase keys),
exactly as the API server serves them. Nothing here may block or perform I/O.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Obj = Mapping[str, Any]


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


@dataclass(frozen=True)
class StaticClusterView:
    """An in-memory ClusterView: for unit tests, the offline checker and ``serve --dev``."""

    quotas: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    ranges: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
    namespaces: Mapping[str, Obj] = field(default_factory=dict)
    node_list: Sequence[Obj] = ()
    queues: Mapping[str, Sequence[Obj]] | None = None
    jobs: Mapping[str, Sequence[Obj]] = field(default_factory=dict)
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


NO_CLUSTER = StaticClusterView(
    available=False, unavailable_reason="no cluster is configured (serving without a kubeconfig)"
)
