"""One kind of cluster object listed and watched into a cache (``Informer``), and the kinds the
cluster-aware rules read (``KINDS``); ``webhook.watch_caches`` puts them together into the view.

One thread per kind lists it with the real ``kubernetes`` client (paginated), then watches from
the list's resourceVersion (with bookmarks). A watch that ends is resumed from the last version
seen; one answered 410 Gone (history compacted) starts over with a fresh list. A failure the API
server answered (an HTTP error) is retried with capped, jittered exponential backoff, up to
``Timing.backoff_max``; an API server that does not answer at all (connection refused or broken:
it is restarting) is tried again at most ``Timing.reconnect_max`` apart, so the cache is current
again seconds after the API server is back, not at the end of a long backoff; the first error it
answers after that starts the backoff over. A kind the cluster does not serve (an optional CRD
not installed) is looked for again every ``absent_recheck`` seconds, and stays "not installed",
never "cut off", while the API server cannot be reached.
"""
from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines


log = logging.getLogger(__name__)

Obj = Mapping[str, Any]
CLUSTER_SCOPED = ""  # the bucket of objects without a namespace
LIST_PAGE = 500  # objects per list page, like client-go's reflector
_EMPTY: tuple[Obj, ...] = ()


# --- what is cached -----------------------------------------------------------------------

def _without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """managedFields are often the larger half of an object and no rule reads them."""
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def _node_essentials(obj: dict[str, Any]) -> dict[str, Any]:
    """Nodes change every few seconds (conditions, images); node-fit reads only these parts, and
    keeping only them makes those heartbeats no-ops for the cache."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "labels", "resourceVersion") if k in meta},
        "spec": {k: spec[k] for k in ("taints", "unschedulable") if k in spec},
        "status": {"allocatable": (obj.get("status") or {}).get("allocatable") or {}},
    }


# The kinds of job the webhook checks.
MPIJOB = "MPIJob"
TRAINJOB = "TrainJob"


@dataclass(frozen=True)
class Kind:
    """A kind of object to cache, and how to ask the API server for it."""

    plural: str
    group: str  # "" for the core API
    versions: tuple[str, ...]  # tried in order; the first one served wins
    namespaced: bool = True
    optional: bool = False  # a CRD that may not be installed: absent is a valid state
    trim: Callable[[dict[str, Any]], dict[str, Any]] = _without_managed_fields
    # The kinds of job whose checks read it: a cache cut off from the API server switches off
    # the cluster checks of those jobs only.
    read_for: frozenset[str] = frozenset({MPIJOB, TRAINJOB})

    @property
    def label(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, version: str) -> str:
        """Where the API server lists and watches the kind across namespaces."""
        return f"/apis/{self.group}/{version}/{self.plural}" if self.group else f"/api/{version}/{self.plural}"


RESOURCE_QUOTAS = Kind("resourcequotas", "", ("v1",))
LIMIT_RANGES = Kind("limitranges", "", ("v1",))
NAMESPACES = Kind("namespaces", "", ("v1",), namespaced=False)
NODES = Kind("nodes", "", ("v1",), namespaced=False, trim=_node_essentials)
LOCAL_QUEUES = Kind("localqueues", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), optional=True)
MPIJOBS = Kind("mpijobs", "kubeflow.org", ("v2beta1",), optional=True)
# Kubeflow Trainer v2: the runtimes TrainJobs name, and the TrainJobs (for quota in flight)
CLUSTER_TRAINING_RUNTIMES = Kind("clustertrainingruntimes", "trainer.kubeflow.org", ("v1alpha1",),
                                 namespaced=False, optional=True, read_for=frozenset({TRAINJOB}))
TRAINING_RUNTIMES = Kind("trainingruntimes", "trainer.kubeflow.org", ("v1alpha1",), optional=True,
                         read_for=frozenset({TRAINJOB}))
TRAINJOBS = Kind("trainjobs", "trainer.kubeflow.org", ("v1alpha1",), optional=True)
KINDS = (RESOURCE_QUOTAS, LIMIT_RANGES, NAMESPACES, NODES, LOCAL_QUEUES, MPIJOBS,
         CLUSTER_TRAINING_RUNTIMES, TRAINING_RUNTIMES, TRAINJOBS)


# --- timing -------------------------------------------------------------------------------

@dataclass
class Backoff:
    """Capped exponential backoff with jitter, so replicas do not reconnect in lockstep."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    _next: float = field(default=0.0, init=False)

    def reset(self) -> None:
        self._next = 0.0

    def next(self, cap: float | None = None) -> float:
        """The next wait; ``cap`` (an API server that does not answer at all) also keeps the
        waits that follow from growing past it."""
        limit = self.maximum if cap is None else min(cap, self.maximum)
        self._next = self.initial if self._next == 0 else min(self._next * self.factor, limit)
        return min(self._next, limit) * random.uniform(0.8, 1.2)


@dataclass(frozen=True)
class Timing:
    stale_after: float = 30.0  # cut off longer than this: the state is no longer trusted
    watch_timeout: tuple[int, int] = (240, 360)  # seconds a watch asks for, picked at random
    connect_timeout: float = 5.0
    list_timeout: float = 60.0
    absent_recheck: float = 60.0  # how often to look again for a CRD that was not installed
    backoff_initial: float = 0.5
    backoff_max: float = 30.0  # after an HTTP error: the API server answered, and may be overloaded
    # The API server not answering (restarting): a refused connection costs it nothing, and the
    # caches should be current again soon after it is back (client-go's reflector waits at most 30 s).
    reconnect_max: float = 2.0


# The query parameters a list or watch is called with, by their names in the API.
_QUERY = {"limit": "limit", "_continue": "continue", "watch": "watch", "resource_version": "resourceVersion",
          "allow_watch_bookmarks": "allowWatchBookmarks", "timeout_seconds": "timeoutSeconds"}


class _Relist(Exception):
    """The watch's resourceVersion is gone (410): list again."""


class _Absent(Exception):
    """No version of the kind is served (a CRD not installed)."""


# --- one kind -----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Bucket:
    """The objects of one namespace: a dict for updates, a tuple for readers. Never mutated
    once published, so readers in request threads need no lock."""

    by_name: Mapping[str, Obj]
    items: tuple[Obj, ...]


# Called with a cache's name (its resource plural) whenever that cache is known to be current.
SyncObserver = Callable[[str], None]


class Informer:
    """Lists and watches one kind into namespace buckets."""

    def __init__(self, kind: Kind, api: client.ApiClient, timing: Timing, stop: threading.Event,
                 on_sync: SyncObserver | None = None, on_synced: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self._on_sync = on_sync
        self._on_synced = on_synced  # after each list, or on finding the kind is not served
        self._api = api
        self._timing = timing
        self._stop = stop
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()  # writers only
        self._response: Any = None
        self._version: str | None = None  # the served API version, once found
        self.synced = False
        self.absent = False
        self.objects = 0
        self.resource_version = ""  # the last version seen (list, event or bookmark)
        self.last_error = ""
        self.cut_off_since: float | None = None  # monotonic time the connection was lost
        self.thread: threading.Thread | None = None

    # --- reading (any thread) -------------------------------------------------------------
    def items(self, namespace: str) -> tuple[Obj, ...]:
        bucket = self._buckets.get(namespace)
        return bucket.items if bucket else _EMPTY

    def get(self, namespace: str, name: str) -> Obj | None:
        bucket = self._buckets.get(namespace)
        return bucket.by_name.get(name) if bucket else None

    def problem(self, now: float) -> str:
        """Why this cache cannot be trusted right now, or ""."""
        if not self.synced:
            detail = f": {self.last_error}" if self.last_error else ""
            return f"{self.kind.label} not listed yet{detail}"
        if self.cut_off_since is not None and now - self.cut_off_since > self._timing.stale_after:
            return (f"lost the watch on {self.kind.label} {now - self.cut_off_since:.0f} s ago"
                    f" ({self.last_error or 'connection lost'})")
        return ""

    # --- the loop (its own thread) ----------------------------------------------------------
    def run(self) -> None:
        backoff = Backoff(self._timing.backoff_initial, self._timing.backoff_max)
        version: str | None = None
        was_unreachable = False
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                    backoff.reset()
                version = self._watch(version, backoff)
            except _Relist:
                log.info("%s: resourceVersion %s expired, listing again", self.kind.label, version)
                version = None
            except _Absent:
                self._mark_absent()
                version = None
                backoff.reset()  # the API server answered
                self._stop.wait(self._timing.absent_recheck)
            except Exception as exc:  # noqa: BLE001 - any failure: note it, back off, retry
                self._lost(exc)
                unreachable = _unreachable(exc)
                if was_unreachable and not unreachable:
                    # It answers again, with an error: start the backoff over. A restarted API
                    # server answers 403 for a few seconds, before its authorizer has read RBAC.
                    backoff.reset()
                was_unreachable = unreachable
                self._stop.wait(backoff.next(self._timing.reconnect_max if unreachable else None))

    def _call(self, version: str, *, timeout: tuple[float, float] | None = None, **params: Any) -> Any:
        """List (or watch) the kind across namespaces through the client's ``ApiClient`` (its
        configuration, credentials, TLS and connection pool), as the generated API classes do;
        the raw response, so objects stay in the API server's JSON shape and are never turned
        into models. Not through ``CoreV1Api``: loading it and the models it names takes about a
        CPU-second in every worker, for four list calls."""
        query = [(_QUERY[name], value) for name, value in params.items() if value is not None]
        request = self._api.param_serialize("GET", self.kind.path(version), query_params=query,
                                            header_params={"Accept": "application/json"},
                                            auth_settings=["BearerToken"])
        response = self._api.call_api(
            *request, _request_timeout=timeout or (self._timing.connect_timeout, self._timing.list_timeout))
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    def _list(self) -> str:
        """List every page into fresh buckets and publish them at once; the list's version."""
        for version in (self._version,) if self._version else self.kind.versions:
            try:
                buckets, rv = self._list_pages(version)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue  # this version is not served (or the CRD is gone)
            self._version = version
            break
        else:
            self._version = None
            raise _Absent()
        with self._lock:
            self._buckets = {ns: _Bucket(objs, tuple(objs.values())) for ns, objs in buckets.items()}
            self.objects = sum(len(objs) for objs in buckets.values())
        self.synced, self.absent = True, False
        self._connected()
        log.info("%s: listed %d objects at resourceVersion %s", self.kind.label, self.objects, rv)
        self.resource_version = rv
        self._in_sync()
        if self._on_synced is not None:
            self._on_synced()
        return rv

    def _list_pages(self, version: str) -> tuple[dict[str, dict[str, Obj]], str]:
        buckets: dict[str, dict[str, Obj]] = {}
        token: str | None = None
        while True:
            try:
                page = json.loads(_read(self._call(version, limit=LIST_PAGE, _continue=token)))
            except ApiException as exc:
                if exc.status == 410 and token:  # the snapshot expired mid-way: start over
                    buckets, token = {}, None
                    continue
                raise
            for obj in page.get("items") or ():
                self._bucket_of(buckets, obj)[_name(obj)] = self.kind.trim(obj)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return buckets, str((page.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, since: str, backoff: Backoff) -> str:
        low, high = self._timing.watch_timeout
        timeout = random.randint(low, high)
        if self._version is None:
            raise _Relist()
        try:
            response = self._call(
                self._version, watch=True, resource_version=since, allow_watch_bookmarks=True,
                timeout_seconds=timeout, timeout=(self._timing.connect_timeout, timeout + 30),
            )
        except ApiException as exc:
            if exc.status in (404, 410):  # history gone, or the CRD removed: list again
                raise _Relist() from exc
            raise
        self._response = response
        self._connected()
        started, events = time.monotonic(), 0
        try:
            if self._stop.is_set():  # stopped while connecting: interrupt() may have missed it
                return since
            for line in iter_resp_lines(response):
                if line:
                    since = self.resource_version = self._apply(json.loads(line), since)
                    events += 1
        finally:
            self._response = None
            response.release_conn()
        if events == 0 and time.monotonic() - started < 1:  # ended at once: do not spin
            self._stop.wait(backoff.next())
        else:
            backoff.reset()
        return since

    def _apply(self, event: Mapping[str, Any], since: str) -> str:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Relist()
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        version = str((obj.get("metadata") or {}).get("resourceVersion") or since)
        if kind in ("ADDED", "MODIFIED"):
            self._put(obj)
        elif kind == "DELETED":
            self._remove(obj)
        self._in_sync()
        return version  # BOOKMARK: only the version moves

    def _in_sync(self) -> None:
        """Tell the observer (the cache-age metric) that this cache is current as of now; a
        bookmark counts, so a quiet cluster does not look stale."""
        if self._on_sync is not None:
            try:
                self._on_sync(self.kind.plural)
            except Exception:  # noqa: BLE001 - a metrics failure must not stop the watch
                log.exception("%s: sync observer failed", self.kind.label)

    def _put(self, obj: dict[str, Any]) -> None:
        trimmed = self.kind.trim(obj)
        namespace, name = self._namespace(obj), _name(obj)
        with self._lock:
            bucket = self._buckets.get(namespace)
            current = bucket.by_name if bucket else {}
            if _same_content(current.get(name), trimmed):
                return
            updated = {**current, name: trimmed}
            self.objects += name not in current
            self._buckets[namespace] = _Bucket(updated, tuple(updated.values()))

    def _remove(self, obj: Mapping[str, Any]) -> None:
        namespace, name = self._namespace(obj), _name(obj)
        with self._lock:
            bucket = self._buckets.get(namespace)
            if not bucket or name not in bucket.by_name:
                return
            updated = {k: v for k, v in bucket.by_name.items() if k != name}
            self.objects -= 1
            if updated:
                self._buckets[namespace] = _Bucket(updated, tuple(updated.values()))
            else:
                del self._buckets[namespace]

    def _namespace(self, obj: Mapping[str, Any]) -> str:
        if not self.kind.namespaced:
            return CLUSTER_SCOPED
        return (obj.get("metadata") or {}).get("namespace") or CLUSTER_SCOPED

    def _bucket_of(self, buckets: dict[str, dict[str, Obj]], obj: Mapping[str, Any]) -> dict[str, Obj]:
        return buckets.setdefault(self._namespace(obj), {})

    # --- connection state -------------------------------------------------------------------
    def _connected(self) -> None:
        if self.cut_off_since is not None:
            log.info("%s: watching again", self.kind.label)
        self.cut_off_since = None
        self.last_error = ""

    def _lost(self, exc: Exception) -> None:
        if self._stop.is_set():
            return
        error = _describe(exc, self.kind)
        # once per outage (and when the cause changes), not once per retry
        level = logging.WARNING if self.cut_off_since is None or error != self.last_error else logging.DEBUG
        if self.absent:  # what was last known still holds: not installed (nothing to go stale)
            log.log(logging.INFO if error != self.last_error else logging.DEBUG,
                    "%s: looking for it again failed: %s; retrying", self.kind.label, error)
            self.last_error = error
            return
        log.log(level, "%s: %s; retrying with backoff", self.kind.label, error)
        self.last_error = error
        if self.cut_off_since is None:
            self.cut_off_since = time.monotonic()

    def _mark_absent(self) -> None:
        newly = not self.absent
        if newly:
            log.info("%s is not served by this cluster; looking again every %.0f s",
                     self.kind.label, self._timing.absent_recheck)
        with self._lock:
            self._buckets = {}
            self.objects = 0
        self.absent, self.synced = True, True
        self._connected()
        if newly and self._on_synced is not None:  # not on every look: nothing new was listed
            self._on_synced()

    def interrupt(self) -> None:
        """Unblock a thread waiting on its watch (used when stopping)."""
        response = self._response
        if response is None:
            return
        try:
            shutdown = getattr(response, "shutdown", None)  # urllib3 ≥ 2.3 unblocks a pending read
            (shutdown or response.close)()
        except Exception:  # noqa: BLE001 - best effort while stopping
            pass


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _read(response: Any) -> bytes:
    try:
        return response.data
    finally:
        response.release_conn()


def _without_version(obj: Obj) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


def _same_content(old: Obj | None, new: Obj) -> bool:
    """Equal apart from resourceVersion (a node heartbeat that changed nothing we keep)."""
    return old is not None and _without_version(old) == _without_version(new)


def _unreachable(exc: BaseException) -> bool:
    """The API server did not answer at all: the connection was refused, reset, broken or not
    made in time (it is stopped or restarting), as opposed to an HTTP error it sent or a request
    it took too long to answer."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return _unreachable(exc.reason)
    if isinstance(exc, (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError,
                        urllib3.exceptions.ProtocolError, ConnectionError)):
        return True
    return "Connection broken" in str(exc)


def _describe(exc: BaseException, kind: Kind) -> str:
    """A failure in a few words (it ends up in a warning of at most 256 characters)."""
    if isinstance(exc, ApiException):
        if exc.status in (401, 403):
            return f"HTTP {exc.status}: not allowed to list {kind.label} (RBAC)"
        return f"HTTP {exc.status} {exc.reason}"
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return _describe(exc.reason, kind)
    text = str(exc)
    errno = re.search(r"\[Errno -?\d+\] ([^'\"()\]]+)", text)  # urllib3 wraps the socket error deep inside
    if errno:
        return errno.group(1).strip().lower()
    if isinstance(exc, urllib3.exceptions.ProtocolError) or "Connection broken" in text:
        return "connection broken"
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        return "read timed out"
    text = text or type(exc).__name__
    return text if len(text) <= 80 else text[:77] + "..."

