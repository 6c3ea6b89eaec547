"""The Deployment and what surrounds it: high availability, restricted Pod Security, the command
line the real CLI accepts, probes on the server's real routes, volumes where the server reads."""
from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from policies.config.reader import parse_policy
from tests.manifests.build import INSTALL_OVERLAYS, Object, find
from webhook import create_app
from webhook.cli import build_parser

RESTRICTED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                           "projected", "secret"}


def deployment(objects: list[Object]) -> Object:
    return find(objects, "Deployment", "mpijob-webhook")


def pod_spec(objects: list[Object]) -> dict[str, Any]:
    return deployment(objects)["spec"]["template"]["spec"]


def container(objects: list[Object]) -> dict[str, Any]:
    containers = pod_spec(objects)["containers"]
    assert len(containers) == 1
    return containers[0]


def server_routes() -> dict[str, set[str]]:
    app = create_app()
    return {rule.rule: set(rule.methods or ()) for rule in app.url_map.iter_rules()}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, "only matchLabels is used here"
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def mounts(objects: list[Object]) -> dict[str, dict[str, Any]]:
    """mountPath → the volume mounted there."""
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    return {m["mountPath"]: {**volumes[m["name"]], "readOnly": m.get("readOnly", False)}
            for m in container(objects)["volumeMounts"]}


def serve_args(objects: list[Object]):
    c = container(objects)
    assert "command" not in c, "the image's ENTRYPOINT runs mpijob-webhook; the Deployment passes args only"
    return build_parser().parse_args(c["args"])


def mounted_volume(objects: list[Object], path: str) -> dict[str, Any]:
    """The volume a file path lives in (the longest mount path that contains it)."""
    candidates = [(m, v) for m, v in mounts(objects).items() if PurePosixPath(path).is_relative_to(m)]
    assert candidates, f"{path} is on no volume"
    return max(candidates, key=lambda mv: len(mv[0]))[1]


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
class TestHighAvailability:
    def test_three_replicas_never_all_disrupted(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        objects = overlays[overlay]
        d = deployment(objects)
        assert d["spec"]["replicas"] == 3
        assert d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
        pdb = find(objects, "PodDisruptionBudget", "mpijob-webhook")
        assert pdb["spec"]["minAvailable"] == 1
        assert selects(pdb["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])

    def test_replicas_spread_over_nodes(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        objects = overlays[overlay]
        labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
        by_key = {c["topologyKey"]: c for c in pod_spec(objects)["topologySpreadConstraints"]}
        hostname = by_key["kubernetes.io/hostname"]
        assert hostname["maxSkew"] == 1 and hostname["whenUnsatisfiable"] == "DoNotSchedule"
        assert selects(hostname["labelSelector"], labels)
        assert selects(by_key["topology.kubernetes.io/zone"]["labelSelector"], labels)

    def test_critical_priority(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        assert pod_spec(overlays[overlay])["priorityClassName"] == "system-cluster-critical"

    def test_requests_and_limits(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        resources = container(overlays[overlay])["resources"]
        assert set(resources["requests"]) == {"cpu", "memory"}
        assert set(resources["limits"]) == {"cpu", "memory"}


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
class TestRestrictedPodSecurity:
    def test_pod_and_container_security_context(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        spec = pod_spec(overlays[overlay])
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["runAsNonRoot"] is True
            assert sc.get("privileged", False) is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert sc.get("runAsUser", 1) != 0

    def test_nothing_from_the_host(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        spec = pod_spec(overlays[overlay])
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            assert spec.get(field, False) is False, field
        for volume in spec["volumes"]:
            kinds = set(volume) - {"name"}
            assert kinds <= RESTRICTED_VOLUME_TYPES, volume
        for c in spec["containers"]:
            assert all("hostPort" not in p for p in c.get("ports", []))

    def test_namespace_enforces_restricted(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        labels = find(overlays[overlay], "Namespace", "mpijob-webhook")["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_fixed_user_outside_openshift_and_none_on_openshift(overlays: dict[str, list[Object]]) -> None:
    for overlay in ("cert-manager", "self-signed"):
        sc = pod_spec(overlays[overlay])["securityContext"]
        assert sc["runAsUser"] == sc["runAsGroup"] == sc["fsGroup"] == 10001
    # restricted-v2 assigns them from the namespace's range and refuses fixed ones.
    assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(pod_spec(overlays["openshift"])["securityContext"])


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
class TestServeCommand:
    def test_args_parse_with_the_real_cli(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        args = serve_args(overlays[overlay])
        assert args.command == "serve"
        assert not args.dev

    def test_certificate_and_key_come_from_the_tls_secret(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        objects = overlays[overlay]
        args = serve_args(objects)
        for path, key in ((args.cert_file, "tls.crt"), (args.key_file, "tls.key")):
            volume = mounted_volume(objects, str(path))
            assert volume["secret"]["secretName"] == "mpijob-webhook-tls"
            assert volume["readOnly"] is True
            assert PurePosixPath(str(path)).name == key

    def test_policy_file_comes_from_the_policy_configmap(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        objects = overlays[overlay]
        path = getattr(serve_args(objects), "policy_file", None)
        assert path is not None, "serve has no --policy-file"
        volume = mounted_volume(objects, str(path))
        configmap = find(objects, "ConfigMap", volume["configMap"]["name"])
        assert PurePosixPath(str(path)).name in configmap["data"]
        assert "items" not in volume["configMap"] and "subPath" not in str(container(objects)["volumeMounts"])

    def test_listens_on_the_container_port(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        objects = overlays[overlay]
        ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
        assert serve_args(objects).port == ports["https"] == 8443
        assert serve_args(objects).health_port == ports["health"] == 8081

    def test_writable_places_are_memory_backed_volumes(self, overlays: dict[str, list[Object]], overlay: str) -> None:
        objects = overlays[overlay]
        assert "emptyDir" in mounts(objects)["/tmp"]
        env = {e["name"]: e.get("value") for e in container(objects).get("env", [])}
        metrics_dir = env["PROMETHEUS_MULTIPROC_DIR"]
        volume = mounted_volume(objects, metrics_dir + "/counter_1.db")
        assert volume["emptyDir"]["medium"] == "Memory" and volume["readOnly"] is False


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_probes_use_the_servers_routes(overlays: dict[str, list[Object]], overlay: str) -> None:
    c = container(overlays[overlay])
    routes = server_routes()
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = c[probe]["httpGet"]
        assert "GET" in routes[get["path"]], get["path"]
        # The plain health port: the kubelet presents no client certificate (serve --client-ca-file).
        assert get["scheme"] == "HTTP" and get["port"] == "health"


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_service_reaches_the_pods_on_443_and_their_metrics_on_8081(overlays: dict[str, list[Object]], overlay: str) -> None:
    objects = overlays[overlay]
    service = find(objects, "Service", "mpijob-webhook")
    pod_labels = deployment(objects)["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in service["spec"]["selector"].items())
    container_ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    ports = {p["name"]: (p["port"], container_ports[p["targetPort"]]) for p in service["spec"]["ports"]}
    assert ports == {"https": (443, 8443), "metrics": (8081, 8081)}


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_network_policy_admits_anyone_to_https_and_only_monitoring_to_the_health_port(
        overlays: dict[str, list[Object]], overlay: str) -> None:
    objects = overlays[overlay]
    policy = find(objects, "NetworkPolicy", "mpijob-webhook")["spec"]
    assert selects(policy["podSelector"], deployment(objects)["spec"]["template"]["metadata"]["labels"])
    assert "Ingress" in policy["policyTypes"]
    ports = {(p["port"], p["protocol"]) for rule in policy["ingress"] for p in rule["ports"]}
    container_ports = {(p["containerPort"], p["protocol"]) for p in container(objects)["ports"]}
    assert ports == container_ports == {(8443, "TCP"), (8081, "TCP")}
    sources = {p["port"]: rule.get("from") for rule in policy["ingress"] for p in rule["ports"]}
    assert sources[8443] is None  # the API server's address differs per distribution
    (monitoring,) = sources[8081]
    (namespaces,) = monitoring["namespaceSelector"]["matchExpressions"]
    assert namespaces["key"] == "kubernetes.io/metadata.name" and namespaces["operator"] == "In"
    assert {"openshift-monitoring", "openshift-user-workload-monitoring", "monitoring"} == set(namespaces["values"])


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_policy_configmap_holds_a_valid_policy(overlays: dict[str, list[Object]], overlay: str) -> None:
    configmap = find(overlays[overlay], "ConfigMap", "mpijob-webhook-policy")
    (text,) = configmap["data"].values()
    assert yaml.safe_load(text)["kind"] == "Policy"
    parse_policy(text, source="manifests/base/policy.yaml", own_namespace="mpijob-webhook")
