"""A small Kubernetes API server for tests and benchmarks: the real REST list/watch protocol over
HTTP, so the webhook's caches are driven by the real ``kubernetes`` client.

What it speaks, like kube-apiserver:

- ``GET /api/v1/{plural}``, ``/api/v1/namespaces/{ns}/{plural}``, ``/apis/{group}/{version}/{plural}``
  and ``/apis/{group}/{version}/namespaces/{ns}/{plural}`` list objects as ``{Kind}List`` with
  ``metadata.resourceVersion``, paginated with ``limit`` / ``continue`` (a consistent snapshot; a
  token can be used again until ``compact``, then it is answered 410). The items of a built-in
  kind carry no ``kind`` and ``apiVersion``, those of a custom resource do;
- ``?watch=true&resourceVersion=N`` streams newline-delimited events (chunked) after ``N``:
  ``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK`` (with ``allowWatchBookmarks``) and, when ``N``
  is older than the retained history, an ``ERROR`` event carrying a 410 ``Expired`` Status, as a
  1.36 API server's watch cache sends it (with ``gone_as_http_status``, an HTTP 410 answer instead,
  which 1.36 does not give: kept so the caches are tested against both); ``timeoutSeconds`` ends
  the stream;
- discovery (``/apis``, ``/apis/{group}``, ``/apis/{group}/{version}``) for what is installed; a
  resource that is not installed answers 404 like the real server: the plain-text ``404 page not
  found`` when no version of its group is served (a CRD absent), a NotFound Status otherwise;
- a ``forbidden`` plural is answered 403 before anything else (authorization comes first: also
  when it is not installed), with the API server's message for a ServiceAccount without RBAC.

``tests/kube/test_imitation_contract.py`` runs each of these against a real kube-apiserver too.

Test controls: ``apply`` / ``delete`` objects, ``install`` / ``uninstall`` resources,
``compact`` the history, ``drop_watches`` (a network blip), ``go_down`` / ``come_back`` (the API
server unreachable; it keeps its history, so a restart is ``go_down`` and ``compact``: a real API
server's watch cache starts over from the present), ``send_bookmarks``, ``forbidden`` plurals
(RBAC), and per-path request counts. Start with ``with KubeAPI() as api:``; it binds a free port.
"""
from __future__ import annotations

import base64
import copy
import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


# continue tokens kept (each holds the rest of its list); an older one expires (410)
MAX_SNAPSHOTS = 256
EXPIRED_CONTINUE = ("The provided continue parameter is too old to display a consistent list result. You can start "
                    "a new list without the continue parameter.")
SERVICE_ACCOUNT = "system:serviceaccount:mpijob-webhook:mpijob-webhook"  # the user a 403 names by default

CORE = (
    Resource("", "v1", "resourcequotas", "ResourceQuota"),
    Resource("", "v1", "limitranges", "LimitRange"),
    Resource("", "v1", "namespaces", "Namespace", namespaced=False),
    Resource("", "v1", "nodes", "Node", namespaced=False),
)
MPIJOBS = Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob")
# Kubeflow Trainer v2
CLUSTER_TRAINING_RUNTIMES = Resource("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes",
                                     "ClusterTrainingRuntime", namespaced=False)
TRAINING_RUNTIMES = Resource("trainer.kubeflow.org", "v1alpha1", "trainingruntimes", "TrainingRuntime")
TRAINJOBS = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")
TRAINER = (CLUSTER_TRAINING_RUNTIMES, TRAINING_RUNTIMES, TRAINJOBS)


def local_queues(version: str = "v1beta1") -> Resource:
    return Resource("kueue.x-k8s.io", version, "localqueues", "LocalQueue")


@dataclass
class _Event:
    rv: int
    type: str
    obj: dict[str, Any]


@dataclass
class _Collection:
    resource: Resource
    objects: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[_Event] = field(default_factory=list)


class KubeAPI:
    def __init__(self, resources: Iterable[Resource] = (*CORE, MPIJOBS), *, history: int = 10_000,
                 host: str = "127.0.0.1") -> None:
        self._cond = threading.Condition()
        self._collections: dict[tuple[str, str, str], _Collection] = {}
        self._rv = 1000
        self._compacted_rv = 0  # watches from an older resourceVersion get 410 Gone
        self._history = history
        self._snapshots: dict[str, tuple[int, list[dict[str, Any]]]] = {}
        self._generation = 0  # bumped by drop_watches: streams of older generations end
        self._down = False
        self._bookmarks = 0
        self.gone_as_http_status = False
        self.forbidden: set[str] = set()  # plurals answered 403, like a missing RBAC rule
        self.user = SERVICE_ACCOUNT  # whom a 403 names
        self.requests: dict[str, int] = {}
        for resource in resources:
            self.install(resource)
        self._server = ThreadingHTTPServer((host, 0), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # --- lifecycle --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an IPv4 or IPv6 address, never bytes
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="kube-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() would wait forever for a loop never started
            self._server.shutdown()
        with self._cond:
            self._generation += 1
            self._down = True
            self._cond.notify_all()
        self._server.server_close()
        if self._thread:
            self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig file pointing at this server (token auth, as a service account would)."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "webhook", "user": {"token": "test-token"}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "webhook"}}],
        }))
        return path

    # --- what is installed --------------------------------------------------------------------
    def install(self, resource: Resource) -> None:
        with self._cond:
            self._collections.setdefault((resource.group, resource.version, resource.plural), _Collection(resource))

    def uninstall(self, resource: Resource) -> None:
        with self._cond:
            self._collections.pop((resource.group, resource.version, resource.plural), None)
            self._generation += 1
            self._cond.notify_all()

    def _collection_of(self, obj: Mapping[str, Any]) -> _Collection:
        api_version, kind = obj.get("apiVersion", "v1"), obj["kind"]
        for collection in self._collections.values():
            if collection.resource.kind == kind and collection.resource.api_version == api_version:
                return collection
        for collection in self._collections.values():  # the same kind served in another version
            if collection.resource.kind == kind:
                return collection
        raise KeyError(f"{api_version} {kind} is not installed")

    # --- objects ------------------------------------------------------------------------------
    def apply(self, *objects: Mapping[str, Any]) -> int:
        """Create or replace objects; returns the resourceVersion of the last one."""
        with self._cond:
            for obj in objects:
                collection = self._collection_of(obj)
                stored = copy.deepcopy(dict(obj))
                meta = stored.setdefault("metadata", {})
                namespace = meta.get("namespace", "") if collection.resource.namespaced else ""
                key = (namespace, meta["name"])
                previous = collection.objects.get(key)
                self._rv += 1
                meta["resourceVersion"] = str(self._rv)
                meta["uid"] = (previous or {}).get("metadata", {}).get("uid") or str(uuid.uuid4())
                meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
                stored["apiVersion"] = collection.resource.api_version
                collection.objects[key] = stored
                self._record(collection, "MODIFIED" if previous else "ADDED", stored)
            self._cond.notify_all()
            return self._rv

    def delete(self, obj: Mapping[str, Any]) -> None:
        with self._cond:
            collection = self._collection_of(obj)
            meta = obj["metadata"]
            namespace = meta.get("namespace", "") if collection.resource.namespaced else ""
            stored = collection.objects.pop((namespace, meta["name"]))
            self._rv += 1
            gone = copy.deepcopy(stored)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            self._record(collection, "DELETED", gone)
            self._cond.notify_all()

    def _record(self, collection: _Collection, kind: str, obj: dict[str, Any]) -> None:
        collection.events.append(_Event(self._rv, kind, obj))
        if len(collection.events) > self._history:
            dropped = collection.events[: len(collection.events) - self._history]
            del collection.events[: len(dropped)]
            self._compacted_rv = max(self._compacted_rv, dropped[-1].rv)

    # --- failure injection --------------------------------------------------------------------
    def compact(self) -> None:
        """Forget all history, like etcd compaction: a watch from any earlier version gets 410."""
        with self._cond:
            self._compacted_rv = self._rv
            for collection in self._collections.values():
                collection.events.clear()
            self._snapshots.clear()

    def drop_watches(self) -> None:
        """End every open watch stream (a load balancer timeout, an API server restart)."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def go_down(self) -> None:
        """Close every connection and answer none until ``come_back``."""
        with self._cond:
            self._down = True
            self._generation += 1
            self._cond.notify_all()

    def come_back(self) -> None:
        with self._cond:
            self._down = False

    def send_bookmarks(self) -> None:
        with self._cond:
            self._bookmarks += 1
            self._cond.notify_all()

    def count(self, path_prefix: str, *, watch: bool | None = None) -> int:
        """Requests seen whose path starts with ``path_prefix`` (lists, watches or both)."""
        with self._cond:
            return sum(n for key, n in self.requests.items()
                       if key.split(" ")[1].startswith(path_prefix)
                       and (watch is None or (key.startswith("WATCH") == watch)))

    # --- serving ------------------------------------------------------------------------------
    def _find(self, group: str, version: str, plural: str) -> _Collection | None:
        return self._collections.get((group, version, plural))

    def _list(self, collection: _Collection, namespace: str | None, limit: int | None,
              token: str | None) -> dict[str, Any]:
        with self._cond:
            if token:
                if token not in self._snapshots:
                    raise _Gone(EXPIRED_CONTINUE)
                rv, items = self._snapshots[token]
            else:
                rv = self._rv
                items = [_as_listed(collection.resource, o) for (ns, _), o in sorted(collection.objects.items())
                         if namespace is None or ns == namespace]
            page, rest = (items[:limit], items[limit:]) if limit else (items, [])
            metadata: dict[str, Any] = {"resourceVersion": str(rv)}
            if rest:
                next_token = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()
                self._snapshots[next_token] = (rv, rest)
                while len(self._snapshots) > MAX_SNAPSHOTS:  # the oldest token expires
                    del self._snapshots[next(iter(self._snapshots))]
                metadata["continue"] = next_token
                metadata["remainingItemCount"] = len(rest)
        return {"kind": f"{collection.resource.kind}List", "apiVersion": collection.resource.api_version,
                "metadata": metadata, "items": copy.deepcopy(page)}

    def _watch(self, collection: _Collection, namespace: str | None, since: int | None,
               bookmarks: bool, timeout: float) -> Iterator[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        with self._cond:
            generation, seen_bookmarks = self._generation, self._bookmarks
            if since is None:  # no version: the current state first, then changes
                backlog = [_Event(self._rv, "ADDED", copy.deepcopy(o)) for o in collection.objects.values()]
                since = self._rv
            elif since < self._compacted_rv:
                yield _expired(since, self._compacted_rv)
                return
            else:
                backlog = [e for e in collection.events if e.rv > since]
        while True:
            for event in backlog:
                if namespace is None or event.obj["metadata"].get("namespace") == namespace:
                    yield {"type": event.type, "object": event.obj}
                since = max(since, event.rv)
            with self._cond:
                while True:
                    if self._generation != generation or self._down:
                        return
                    if collection is not self._find(*_key(collection.resource)):
                        return
                    backlog = [e for e in collection.events if e.rv > since]
                    if backlog:
                        break
                    if bookmarks and self._bookmarks != seen_bookmarks:
                        seen_bookmarks = self._bookmarks
                        since = self._rv
                        backlog = []
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    self._cond.wait(min(remaining, 0.5))
                bookmark_rv = None if backlog else since
            if bookmark_rv is not None:
                yield {"type": "BOOKMARK", "object": {
                    "kind": collection.resource.kind, "apiVersion": collection.resource.api_version,
                    "metadata": {"resourceVersion": str(bookmark_rv)}}}

    def _serves_group(self, group: str) -> bool:
        return any(c.resource.group == group for c in self._collections.values())

    def _discovery(self, parts: list[str]) -> dict[str, Any] | None:
        groups: dict[str, list[Resource]] = {}
        for collection in self._collections.values():
            groups.setdefault(collection.resource.group, []).append(collection.resource)
        if parts == ["apis"]:
            return {"kind": "APIGroupList", "apiVersion": "v1",
                    "groups": [_group(name, rs) for name, rs in sorted(groups.items()) if name]}
        if len(parts) == 2 and parts[1] in groups and parts[1]:
            return _group(parts[1], groups[parts[1]])
        if len(parts) == 3 and parts[1] in groups:
            resources = [r for r in groups[parts[1]] if r.version == parts[2]]
            if resources:
                return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{parts[1]}/{parts[2]}",
                        "resources": [{"name": r.plural, "kind": r.kind, "namespaced": r.namespaced,
                                       "verbs": ["get", "list", "watch"]} for r in resources]}
        return None


def _as_listed(resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    """An object as a list carries it: a built-in kind's items have no kind and apiVersion (the
    list says them once), a custom resource's keep theirs."""
    if resource.group:
        return obj
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def _key(resource: Resource) -> tuple[str, str, str]:
    return resource.group, resource.version, resource.plural


def _group(name: str, resources: list[Resource]) -> dict[str, Any]:
    versions = sorted({r.version for r in resources}, reverse=True)
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": entries, "preferredVersion": entries[0]}


class _Gone(Exception):
    pass


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
              "reason": reason}
    if details is not None:
        status["details"] = details
    return {**status, "code": code}


def _forbidden(parsed: tuple[str, str, str | None, str], verb: str, user: str) -> dict[str, Any]:
    """The API server's answer to a user that RBAC does not allow ``verb`` on a collection."""
    group, _, namespace, plural = parsed
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    resource = f"{plural}.{group}" if group else plural
    return _status(403, "Forbidden", f'{resource} is forbidden: User "{user}" cannot {verb} resource '
                                     f'"{plural}" in API group "{group}" {scope}',
                   details={**({"group": group} if group else {}), "kind": plural})


def _expired(since: int, oldest: int) -> dict[str, Any]:
    return {"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {since} ({oldest})")}


def _parse_path(path: str) -> tuple[str, str, str | None, str] | None:
    """(group, version, namespace, plural) of a collection path, or None."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if len(rest) == 1:
        return group, version, None, rest[0]
    if len(rest) == 3 and rest[0] == "namespaces":
        return group, version, rest[1], rest[2]
    return None


def _handler(api: KubeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body leave at once, as from a real server

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet in tests
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if api._down:
                self.close_connection = True
                self.connection.close()
                return
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            watching = query.get("watch") in ("true", "1")
            with api._cond:
                key = f"{'WATCH' if watching else 'LIST'} {url.path}"
                api.requests[key] = api.requests.get(key, 0) + 1
            parsed = _parse_path(url.path)
            if parsed is not None and parsed[3] in api.forbidden:
                return self._send(403, _forbidden(parsed, "watch" if watching else "list", api.user))
            collection = api._find(*parsed[:2], parsed[3]) if parsed else None
            if collection is None:
                found = api._discovery([p for p in url.path.split("/") if p])
                if found is not None:
                    return self._send(200, found)
                if parsed is not None and parsed[0] and not api._serves_group(parsed[0]):
                    return self._send_text(404, "404 page not found\n")
                return self._send(404, _status(404, "NotFound", "the server could not find the requested resource",
                                               details={}))
            assert parsed is not None  # a collection was found in it
            namespace = parsed[2] if collection.resource.namespaced else None
            if watching:
                return self._stream(collection, namespace, query)
            try:
                limit = int(query["limit"]) if query.get("limit") else None
                return self._send(200, api._list(collection, namespace, limit, query.get("continue")))
            except _Gone as gone:
                return self._send(410, _status(410, "Expired", str(gone)))

        def _stream(self, collection: _Collection, namespace: str | None, query: dict[str, str]) -> None:
            raw = query.get("resourceVersion") or ""
            since = int(raw) if raw not in ("", "0") else None
            if api.gone_as_http_status and since is not None and since < api._compacted_rv:
                return self._send(410, _expired(since, api._compacted_rv)["object"])
            timeout = float(query.get("timeoutSeconds") or 1800)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                events = api._watch(collection, namespace, since, query.get("allowWatchBookmarks") == "true", timeout)
                for event in events:
                    data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                if api._down:  # vanish without the final chunk, like a dead peer
                    self.close_connection = True
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _send_text(self, code: int, text: str) -> None:
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send(self, code: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body, separators=(",", ":")).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
