"""Watch-backed caches of the cluster state the cluster-aware rules read (``policies.cluster_view``).

Each kind is listed and watched by an ``Informer`` of its own (``webhook.kind_watch``). A request
never talks to the API server: the rules read immutable snapshots, indexed by namespace, so a
lookup costs the same with 1 namespace or 10,000.

The view is *available* once every kind has been listed and none has been cut off from the API
server for longer than ``stale_after`` seconds; otherwise the engine skips the cluster rules and
says why (``unavailable_reason``). Only the kinds a job's checks read count
(``ClusterCaches.for_job_kind``): a TrainJob runtime's cache cut off never switches off an
MPIJob's quota check, and a kind the cluster does not serve never counts as cut off. Readiness
only waits for the first lists: a webhook that went unready whenever the API server hiccupped
would block every MPIJob through its failurePolicy.
"""
from __future__ import annotations

import copy
import gc
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client, config

from policies.cluster_view import CLUSTER_TRAINING_RUNTIME, NO_CLUSTER, ClusterView, StaticClusterView
from webhook.kind_watch import (  # noqa: F401 - the kinds and timing are part of this module's interface
    CLUSTER_SCOPED,
    CLUSTER_TRAINING_RUNTIMES,
    KINDS,
    LIMIT_RANGES,
    LOCAL_QUEUES,
    MPIJOB,
    MPIJOBS,
    NAMESPACES,
    NODES,
    RESOURCE_QUOTAS,
    TRAINING_RUNTIMES,
    TRAINJOB,
    TRAINJOBS,
    Backoff,
    Informer,
    Kind,
    Obj,
    SyncObserver,
    Timing,
)
from webhook.runtime import ReadinessCheck

log = logging.getLogger(__name__)
_EMPTY: tuple[Obj, ...] = ()


class ClusterCaches:
    """The webhook's ClusterView: start() once per process, then read from any thread."""

    def __init__(self, api: client.ApiClient, *, timing: Timing = Timing(),
                 kinds: Sequence[Kind] = KINDS, on_sync: SyncObserver | None = None,
                 freeze_heap: bool = False) -> None:
        self._stop = threading.Event()
        self._api = api
        self._timing = timing
        self._informers = {kind.plural: Informer(kind, api, timing, self._stop, on_sync, self._listed)
                           for kind in kinds}
        self._informer_list = tuple(self._informers.values())
        self._deciding = self._informer_list  # the caches whose health decides ``available``
        self._freeze_heap = freeze_heap
        self._heap_frozen = False

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> ClusterCaches:
        for informer in self._informers.values():
            informer.thread = threading.Thread(target=informer.run, name=f"watch-{informer.kind.plural}",
                                               daemon=True)
            informer.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for informer in self._informers.values():
            informer.interrupt()
        deadline = time.monotonic() + timeout
        for informer in self._informers.values():
            if informer.thread is not None:
                informer.thread.join(max(deadline - time.monotonic(), 0.01))
        self._api.close()

    def _listed(self) -> None:
        """With ``freeze_heap`` (a server process), once every cache holds its first list the
        objects in memory (the caches, the modules imported) are frozen out of the garbage
        collector's full collections: with 10,000 namespaces cached, each full collection would
        otherwise walk them all and stop every request thread for over 100 ms. They are still
        freed when no longer referenced (only a reference cycle among them would stay). A cache
        listed again later (its watch expired: a whole new copy of the kind) is frozen the same
        way, or the stalls would come back with it; objects a watch event adds one at a time
        are collected as usual. ``gc.freeze()`` itself costs nothing: it moves lists."""
        if not self._freeze_heap or not self.synced:
            return
        first = not self._heap_frozen
        self._heap_frozen = True
        gc.freeze()
        log.info("cluster state %s: %d objects left out of full garbage collections",
                 "cached" if first else "listed again", gc.get_freeze_count())

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.synced:
                return True
            time.sleep(0.02)
        return self.synced

    @property
    def synced(self) -> bool:
        return all(i.synced for i in self._informers.values())

    def resource_versions(self) -> dict[str, str]:
        """The last resourceVersion each cache has seen, by plural (for diagnostics)."""
        return {plural: informer.resource_version for plural, informer in self._informers.items()}

    def readiness(self) -> tuple[bool, str]:
        """For /readyz: ready once every kind was listed."""
        waiting = [i.problem(time.monotonic()) for i in self._informers.values() if not i.synced]
        if waiting:
            return False, "; ".join(waiting)
        counts = ", ".join(f"{i.objects} {i.kind.plural}" + (" (not installed)" if i.absent else "")
                           for i in self._informers.values())
        return True, f"cluster state cached: {counts}"

    def for_job_kind(self, job_kind: str) -> ClusterCaches:
        """The same caches as the view one kind of job (``MPIJOB``, ``TRAINJOB``) is checked
        against: only the caches its checks read decide whether cluster state is available, so
        the Trainer's runtimes, cut off from the API server, never switch off an MPIJob's
        quota check. It shares everything else with this one (stop this one, not it)."""
        view = copy.copy(self)
        view._deciding = tuple(i for i in self._informer_list if job_kind in i.kind.read_for)
        return view

    # --- ClusterView ----------------------------------------------------------------------------
    @property
    def available(self) -> bool:
        return not self.unavailable_reason

    @property
    def unavailable_reason(self) -> str:
        # Asked several times per request: the healthy case is answered without reading the clock.
        for informer in self._deciding:
            if not informer.synced or informer.cut_off_since is not None:
                break
        else:
            return ""
        now = time.monotonic()
        for informer in self._deciding:
            problem = informer.problem(now)
            if problem:
                return problem
        return ""

    def _items(self, plural: str, namespace: str) -> tuple[Obj, ...]:
        informer = self._informers.get(plural)
        return informer.items(namespace) if informer else _EMPTY

    def resource_quotas(self, namespace: str) -> Sequence[Obj]:
        return self._items(RESOURCE_QUOTAS.plural, namespace)

    def limit_ranges(self, namespace: str) -> Sequence[Obj]:
        return self._items(LIMIT_RANGES.plural, namespace)

    def namespace(self, name: str) -> Obj | None:
        informer = self._informers.get(NAMESPACES.plural)
        return informer.get(CLUSTER_SCOPED, name) if informer else None

    def nodes(self) -> Sequence[Obj]:
        return self._items(NODES.plural, CLUSTER_SCOPED)

    def local_queues(self, namespace: str) -> Sequence[Obj] | None:
        informer = self._informers.get(LOCAL_QUEUES.plural)
        if informer is None or informer.absent or not informer.synced:
            return None
        return informer.items(namespace)

    def mpijobs(self, namespace: str) -> Sequence[Obj]:
        return self._items(MPIJOBS.plural, namespace)

    def training_runtime(self, kind: str, namespace: str, name: str) -> Obj | None:
        if kind == CLUSTER_TRAINING_RUNTIME:
            informer, namespace = self._informers.get(CLUSTER_TRAINING_RUNTIMES.plural), CLUSTER_SCOPED
        else:
            informer = self._informers.get(TRAINING_RUNTIMES.plural)
        return informer.get(namespace, name) if informer else None

    def trainjobs(self, namespace: str) -> Sequence[Obj]:
        return self._items(TRAINJOBS.plural, namespace)


# --- connecting ---------------------------------------------------------------------------

def api_client(kubeconfig: Path | None = None) -> client.ApiClient:
    """The ServiceAccount's credentials in a pod, else the given kubeconfig file."""
    configuration = client.Configuration()
    if kubeconfig is not None:
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    # one long-lived watch per kind shares the pool with the lists
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, len(KINDS) + 2)
    # urllib3 logs each of its own retries as a warning: with the API server down, several lines
    # a second for every kind. Each informer logs the outage once, and when it ends.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    return client.ApiClient(configuration)


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and \
        Path("/var/run/secrets/kubernetes.io/serviceaccount/token").is_file()


@dataclass(frozen=True)
class ClusterConnection:
    """What a server process reads the cluster through: a view per kind of job, and the
    readiness check that holds traffic until the caches are filled (None: nothing to wait for)."""

    mpijobs: ClusterView
    trainjobs: ClusterView
    readiness: ReadinessCheck | None


def connect(kubeconfig: Path | None, *, dev: bool = False, timing: Timing = Timing(),
            on_sync: SyncObserver | None = None) -> ClusterConnection:
    """The cluster views of this server process, with its caches started. Without a cluster
    (``--dev``, or outside a cluster with no kubeconfig) the cluster rules are skipped with a
    warning on every response."""
    if kubeconfig is None and (dev or not in_cluster()):
        if not dev:
            log.warning("not running in a cluster and no --kubeconfig given: quota, LimitRange, node and "
                        "queue checks are skipped (each response says so)")
        return ClusterConnection(NO_CLUSTER, NO_CLUSTER, None)
    try:
        api = api_client(kubeconfig)
    except Exception as exc:  # noqa: BLE001 - a broken kubeconfig must not stop admission
        reason = f"cannot connect to the cluster: {type(exc).__name__}: {exc}"
        log.error("%s; quota, LimitRange, node and queue checks are skipped", reason)
        broken = StaticClusterView(available=False, unavailable_reason=reason)
        return ClusterConnection(broken, broken, lambda: (False, reason))
    caches = ClusterCaches(api, timing=timing, on_sync=on_sync, freeze_heap=True).start()
    return ClusterConnection(caches.for_job_kind(MPIJOB), caches.for_job_kind(TRAINJOB), caches.readiness)
