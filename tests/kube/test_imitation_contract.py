"""testing/kube_api_server.py against the real kube-apiserver: each behaviour of the imitation
that the webhook's caches (webhook/watch_caches.py) and their tests rely on, run as one scenario
against both, with the same assertions.

Both are driven the way the caches drive them: raw GETs through the ``kubernetes`` client's
``ApiClient`` (``param_serialize`` / ``call_api``, JSON kept as sent), watch lines read with
``iter_resp_lines``. LimitRanges stand for every kind: no controller writes them, so the only
changes are the test's own. The real server is the session's control plane; the tests that
need a state only the imitation can make on demand (history compacted, a kind forbidden) make
the real one get there its own way (an API server restart, a ServiceAccount without RBAC).
"""
from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config
from kubernetes.watch.watch import iter_resp_lines

from testing.control_plane import ControlPlane
from testing.kube_api_server import CORE, MPIJOBS, KubeAPI, Resource

NAMESPACE_OF_IMITATION = "contract"
WATCH_SECONDS = 2
LIMITS = {"limits": [{"type": "Container", "max": {"cpu": "2"}}]}
# A custom resource of the test's own, installed and removed like an optional integration's CRD.
WIDGETS = Resource("contract.example.org", "v1", "widgets", "Widget")
WIDGETS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{WIDGETS.plural}.{WIDGETS.group}"},
    "spec": {"group": WIDGETS.group, "scope": "Namespaced",
             "names": {"plural": WIDGETS.plural, "singular": "widget", "kind": WIDGETS.kind},
             "versions": [{"name": WIDGETS.version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}
WIDGETS_PATH = f"/apis/{WIDGETS.group}/{WIDGETS.version}/{WIDGETS.plural}"
# A group no test installs (Kueue's and the Trainer's may be, by other tests of the session).
ABSENT_GROUP_PATH = "/apis/absent.contract.example.org/v1/things"
UNAUTHORIZED = "contract-reader"


@dataclass
class Backend:
    """One server, and how a test makes changes on it."""
    name: str
    api: Any  # kubernetes.client.ApiClient
    namespace: str
    plane: ControlPlane | None = None
    imitation: KubeAPI | None = None
    directory: Path = field(default_factory=Path)

    def put(self, name: str, labels: dict[str, str] | None = None) -> str:
        """Create or replace a LimitRange; its new resourceVersion."""
        document = {"apiVersion": "v1", "kind": "LimitRange",
                    "metadata": {"name": name, "namespace": self.namespace, "labels": labels or {}}, "spec": LIMITS}
        if self.imitation is not None:
            return str(self.imitation.apply(document))
        assert self.plane is not None
        applied = self.plane.kubectl("apply", "-o", "json", "-f", "-", input=json.dumps(document)).stdout
        return str(json.loads(applied)["metadata"]["resourceVersion"])

    def delete(self, name: str) -> None:
        if self.imitation is not None:
            self.imitation.delete({"apiVersion": "v1", "kind": "LimitRange",
                                   "metadata": {"name": name, "namespace": self.namespace}})
        else:
            assert self.plane is not None
            self.plane.kubectl("delete", "limitrange", name, "-n", self.namespace)

    def install_widgets(self) -> None:
        if self.imitation is not None:
            self.imitation.install(WIDGETS)
            return
        assert self.plane is not None
        self.plane.apply([WIDGETS_CRD])
        wait_for(lambda: get(self.api, WIDGETS_PATH)[0] == 200, "the CRD to be served")

    def uninstall_widgets(self) -> None:
        if self.imitation is not None:
            self.imitation.uninstall(WIDGETS)
        else:
            assert self.plane is not None
            self.plane.kubectl("delete", "crd", WIDGETS_CRD["metadata"]["name"], "--wait=false", "--ignore-not-found")

    def stop(self) -> None:
        """The API server stops; restarted, it has forgotten its history (the imitation is told:
        its ``go_down`` alone keeps the history, as an API server that is only unreachable does)."""
        if self.imitation is not None:
            self.imitation.go_down()
            self.imitation.compact()
        else:
            assert self.plane is not None
            self.plane.stop_apiserver(grace=3)

    def start(self) -> None:
        if self.imitation is not None:
            self.imitation.come_back()
        else:  # its watch cache starts over from the present
            assert self.plane is not None
            self.plane.start_apiserver()

    @property
    def unauthorized_user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{UNAUTHORIZED}"

    def unauthorized(self, *plurals: str) -> Any:
        """A client that RBAC does not allow to list or watch ``plurals``: on the real server a
        ServiceAccount of the test's namespace with no role bound; the imitation is told so."""
        if self.imitation is not None:
            self.imitation.forbidden.update(plurals)
            self.imitation.user = self.unauthorized_user
            return self.api
        assert self.plane is not None
        self.plane.kubectl("create", "serviceaccount", UNAUTHORIZED, "-n", self.namespace)
        kubeconfig = self.plane.token_kubeconfig(self.directory / "unauthorized.kubeconfig", UNAUTHORIZED,
                                                 self.namespace, duration="10m")
        return self.plane.api_client(kubeconfig)


@pytest.fixture(params=["imitation", "real"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "real":
        plane: ControlPlane = request.getfixturevalue("control_plane")
        namespace: str = request.getfixturevalue("kube_namespace")
        yield Backend("real", plane.api_client(), namespace, plane=plane, directory=tmp_path)
        return
    with KubeAPI((*CORE, MPIJOBS)) as imitation:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(imitation.kubeconfig(tmp_path / "kubeconfig")),
                                client_configuration=configuration)
        yield Backend("imitation", client.ApiClient(configuration), NAMESPACE_OF_IMITATION,
                      imitation=imitation, directory=tmp_path)


# -- the requests, as webhook/watch_caches.py makes them ------------------------------------------

def request(api: Any, path: str, **query: Any) -> Any:
    serialized = api.param_serialize("GET", path, query_params=[(k, v) for k, v in query.items()],
                                     header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
    return api.call_api(*serialized, _request_timeout=(5, 30))


def wait_for(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.2)


def get(api: Any, path: str, **query: Any) -> tuple[int, str]:
    response = request(api, path, **query)
    return response.status, response.read().decode()


def get_json(api: Any, path: str, **query: Any) -> dict[str, Any]:
    status, body = get(api, path, **query)
    assert status == 200, body
    return json.loads(body)


def watch(api: Any, path: str, **query: Any) -> list[dict[str, Any]]:
    """Every event of a watch that ends by its ``timeoutSeconds``."""
    response = request(api, path, watch="true", timeoutSeconds=WATCH_SECONDS, **query)
    assert response.status == 200, response.read()
    started = time.monotonic()
    events = [json.loads(line) for line in iter_resp_lines(response.response) if line]
    assert time.monotonic() - started < WATCH_SECONDS + 5  # ended by the timeout, not a client one
    return events


def collection(backend: Backend) -> str:
    return f"/api/v1/namespaces/{backend.namespace}/limitranges"


def names(items: list[dict[str, Any]]) -> list[str]:
    return [item["metadata"]["name"] for item in items]


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(event["type"], event["object"]["metadata"]["name"]) for event in events if event["type"] != "BOOKMARK"]


def ours(backend: Backend, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the test's namespace (a cluster-wide watch on the real server also sees the
    namespaces of earlier tests go away)."""
    return [event for event in events if event["object"]["metadata"].get("namespace") == backend.namespace]


SCOPES = pytest.mark.parametrize("cluster_wide", [False, True], ids=["namespace", "cluster-wide"])


def watched(backend: Backend, cluster_wide: bool) -> str:
    """The webhook's caches watch cluster-wide; a namespace's collection is the narrower case."""
    return "/api/v1/limitranges" if cluster_wide else collection(backend)


def versions(events: list[dict[str, Any]]) -> list[int]:
    return [int(event["object"]["metadata"]["resourceVersion"]) for event in events]


# -- lists ------------------------------------------------------------------------------------------

def test_a_paged_list_is_one_snapshot_and_its_token_can_be_used_again(backend: Backend) -> None:
    for name in "abc":
        backend.put(name)
    first = get_json(backend.api, collection(backend), limit=2)
    assert (first["kind"], first["apiVersion"]) == ("LimitRangeList", "v1")
    assert sorted(first["metadata"]) == ["continue", "remainingItemCount", "resourceVersion"]
    assert first["metadata"]["remainingItemCount"] == 1
    assert names(first["items"]) == ["a", "b"]
    # a built-in kind's items carry no kind or apiVersion; each has what the caches read
    for item in first["items"]:
        assert "kind" not in item and "apiVersion" not in item
        assert {"name", "namespace", "uid", "resourceVersion", "creationTimestamp"} <= set(item["metadata"])
        assert item["metadata"]["namespace"] == backend.namespace
    listed_c = backend.put("c", {"changed": "after-the-first-page"})
    token = first["metadata"]["continue"]
    second = get_json(backend.api, collection(backend), limit=2, **{"continue": token})
    assert second["metadata"] == {"resourceVersion": first["metadata"]["resourceVersion"]}
    assert names(second["items"]) == ["c"]
    assert "labels" not in second["items"][0]["metadata"] or not second["items"][0]["metadata"]["labels"]
    assert int(second["items"][0]["metadata"]["resourceVersion"]) < int(listed_c)
    assert get_json(backend.api, collection(backend), limit=2, **{"continue": token}) == second
    # the list's version is at least every item's
    whole = get_json(backend.api, collection(backend))
    assert int(whole["metadata"]["resourceVersion"]) >= max(map(int, (i["metadata"]["resourceVersion"]
                                                                    for i in whole["items"])))
    assert "continue" not in whole["metadata"]


# -- watches ------------------------------------------------------------------------------------------

@SCOPES
def test_a_watch_from_a_list_s_version_replays_each_later_change_once_in_order(backend: Backend,
                                                                               cluster_wide: bool) -> None:
    for name in "ab":
        backend.put(name)
    since = get_json(backend.api, watched(backend, cluster_wide), limit=500)["metadata"]["resourceVersion"]
    added = backend.put("d")
    modified = backend.put("a", {"changed": "yes"})
    backend.delete("b")
    events = ours(backend, watch(backend.api, watched(backend, cluster_wide), resourceVersion=since))
    assert summary(events) == [("ADDED", "d"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert [(e["object"]["kind"], e["object"]["apiVersion"]) for e in events] == [("LimitRange", "v1")] * 3
    assert versions(events)[:2] == [int(added), int(modified)]
    assert versions(events)[2] > int(modified)  # a DELETED object carries the version of its deletion
    assert events[1]["object"]["metadata"]["labels"] == {"changed": "yes"}
    # watching again from the last event's version: nothing more
    assert ours(backend, watch(backend.api, watched(backend, cluster_wide),
                               resourceVersion=str(versions(events)[-1]))) == []


@SCOPES
def test_a_watch_from_version_0_starts_with_the_current_state(backend: Backend, cluster_wide: bool) -> None:
    for name in "ab":
        backend.put(name)
    backend.delete("a")
    events = ours(backend, watch(backend.api, watched(backend, cluster_wide), resourceVersion="0"))
    assert summary(events) == [("ADDED", "b")]


def test_a_bookmark_carries_only_the_kind_and_the_latest_version(backend: Backend) -> None:
    """The real server sends bookmarks about once a minute and shortly before a watch's timeout
    (when it has something newer to report; not every time); the imitation sends them when told.
    The webhook only takes the version from them."""
    since = backend.put("a")

    def change_then_bookmark() -> None:
        time.sleep(0.5)
        backend.put("a", {"changed": "yes"})
        if backend.imitation is not None:
            backend.imitation.send_bookmarks()

    changer = threading.Thread(target=change_then_bookmark)
    changer.start()
    response = request(backend.api, collection(backend), watch="true", resourceVersion=since,
                       allowWatchBookmarks="true", timeoutSeconds=6)
    events = [json.loads(line) for line in iter_resp_lines(response.response) if line]
    changer.join()
    assert summary(events) == [("MODIFIED", "a")]
    latest = events[0]["object"]["metadata"]["resourceVersion"]
    bookmarks = [event["object"] for event in events if event["type"] == "BOOKMARK"]
    if backend.imitation is not None:
        assert bookmarks
    for bookmark in bookmarks:
        assert (bookmark["kind"], bookmark["apiVersion"], bookmark["metadata"]) == (
            "LimitRange", "v1", {"resourceVersion": latest})


def test_across_a_restart_watches_end_requests_fail_and_older_versions_get_410_expired(backend: Backend) -> None:
    backend.put("a")
    since = get_json(backend.api, collection(backend))["metadata"]["resourceVersion"]
    backend.put("b")
    open_watch = request(backend.api, collection(backend), watch="true", resourceVersion=since, timeoutSeconds=300)
    ended: list[str] = []

    def read_to_the_end() -> None:
        try:
            ended.extend(json.loads(line)["type"] for line in iter_resp_lines(open_watch.response) if line)
        except urllib3.exceptions.HTTPError:  # cut off mid-stream
            pass
        ended.append("end")

    reader = threading.Thread(target=read_to_the_end, daemon=True)
    reader.start()
    wait_for(lambda: ended == ["ADDED"], "the watch to replay the change after its version")
    backend.stop()
    try:
        reader.join(30)
        assert ended == ["ADDED", "end"], "the watch outlived its API server"
        # no HTTP answer at all while it is down: the client raises
        with pytest.raises(urllib3.exceptions.HTTPError):
            request(backend.api, collection(backend))
    finally:
        backend.start()
    events = watch(backend.api, collection(backend), resourceVersion=since)
    assert [event["type"] for event in events] == ["ERROR"]
    status = events[0]["object"]
    message = status.pop("message")
    assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "reason": "Expired", "code": 410}
    oldest = re.fullmatch(rf"too old resource version: {since} \((\d+)\)", message)
    assert oldest is not None and int(oldest[1]) > int(since), message
    # listing again gives a version to watch from
    again = get_json(backend.api, collection(backend))
    assert names(again["items"]) == ["a", "b"]
    assert watch(backend.api, collection(backend), resourceVersion=again["metadata"]["resourceVersion"]) == []


# -- errors ---------------------------------------------------------------------------------------------

NOT_FOUND = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": "the server could not find the requested resource", "reason": "NotFound", "details": {},
             "code": 404}


@pytest.mark.parametrize("watching", [False, True], ids=["list", "watch"])
def test_a_kind_not_served_is_404(backend: Backend, watching: bool) -> None:
    query = {"watch": "true", "resourceVersion": "1"} if watching else {"limit": 500}
    # no version of the group served (like Kueue or the Trainer not installed): not even a Status
    assert get(backend.api, ABSENT_GROUP_PATH, **query) == (404, "404 page not found\n")
    status, body = get(backend.api, "/api/v1/nosuchthings", **query)
    assert (status, json.loads(body)) == (404, NOT_FOUND)


def test_a_kind_rbac_does_not_allow_is_403_with_the_api_server_s_message(backend: Backend) -> None:
    api = backend.unauthorized("nodes", "resourcequotas", "things")
    for path, verb, resource, group in (("/api/v1/nodes", "list", "nodes", ""),
                                        ("/api/v1/resourcequotas", "watch", "resourcequotas", ""),
                                        # authorization comes first: not installed, still 403
                                        (ABSENT_GROUP_PATH, "list", "things", "absent.contract.example.org")):
        query = {"watch": "true", "resourceVersion": "1"} if verb == "watch" else {"limit": 500}
        status, body = get(api, path, **query)
        named = f"{resource}.{group}" if group else resource
        assert (status, json.loads(body)) == (403, {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f'{named} is forbidden: User "{backend.unauthorized_user}" cannot {verb} resource "{resource}" in API '
                       f'group "{group}" at the cluster scope',
            "reason": "Forbidden", "details": {**({"group": group} if group else {}), "kind": resource}, "code": 403})


def test_removing_a_crd_ends_its_watches_and_its_kind_is_404_again(backend: Backend) -> None:
    backend.install_widgets()
    try:
        since = get_json(backend.api, WIDGETS_PATH, limit=500)["metadata"]["resourceVersion"]
        response = request(backend.api, WIDGETS_PATH, watch="true", resourceVersion=since, timeoutSeconds=60)
        assert response.status == 200
        ended: list[float] = []

        def read_to_the_end() -> None:
            for _ in iter_resp_lines(response.response):
                pass
            ended.append(time.monotonic())

        reader = threading.Thread(target=read_to_the_end, daemon=True)
        reader.start()
        removed = time.monotonic()
        backend.uninstall_widgets()
        reader.join(30)
        assert ended, "the watch outlived its CRD"
        assert ended[0] - removed < 30
        wait_for(lambda: get(backend.api, WIDGETS_PATH, limit=500) == (404, "404 page not found\n"),
                 "the kind to be gone")
    finally:
        backend.uninstall_widgets()  # again, when the test failed before
