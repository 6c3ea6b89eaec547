"""Every overlay builds with kustomize, and every object in it is valid Kubernetes."""
from __future__ import annotations

import kubernetes_validate
import pytest

from tests.manifests.build import INSTALL_OVERLAYS, OVERLAYS, Object

# The oldest Kubernetes these manifests support (OpenShift 4.16) and a current one.
KUBERNETES_VERSIONS = ("1.29", "1.36")
# Custom resources of other projects: no schema ships with kubernetes-validate; their fields
# are checked by the tests of the overlay that uses them.
THIRD_PARTY_KINDS = {
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
BASE_OBJECTS = {
    ("Namespace", "mpijob-webhook"), ("ServiceAccount", "mpijob-webhook"), ("ClusterRole", "mpijob-webhook"),
    ("ClusterRoleBinding", "mpijob-webhook"), ("Service", "mpijob-webhook"), ("Deployment", "mpijob-webhook"),
    ("PodDisruptionBudget", "mpijob-webhook"), ("NetworkPolicy", "mpijob-webhook"),
    ("ConfigMap", "mpijob-webhook-policy"), ("ValidatingWebhookConfiguration", "mpijob-webhook"),
    ("MutatingWebhookConfiguration", "kubeflow-mpijob-webhook"), ("CustomResourceDefinition", "mpijobs.kubeflow.org"),
}


CONSOLE_DASHBOARD = "mpijob-webhook-dashboard"


def kinds_and_names(objects: list[Object]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_builds_without_duplicates(overlays: dict[str, list[Object]], overlay: str) -> None:
    objects = overlays[overlay]
    assert objects
    keys = [(o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_against_the_kubernetes_schemas(overlays: dict[str, list[Object]], overlay: str,
                                                                version: str) -> None:
    problems = []
    for obj in overlays[overlay]:
        if (obj["apiVersion"], obj["kind"]) in THIRD_PARTY_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)  # strict: unknown fields are errors
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{obj['apiVersion']} {obj['kind']} is neither built in nor a known third-party kind")
    assert problems == []


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_install_overlays_hold_the_whole_base(overlays: dict[str, list[Object]], overlay: str) -> None:
    assert BASE_OBJECTS <= kinds_and_names(overlays[overlay])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_namespaced_objects_live_in_the_webhook_namespace(overlays: dict[str, list[Object]], overlay: str) -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration",
                      "MutatingWebhookConfiguration", "CustomResourceDefinition"}
    for obj in overlays[overlay]:
        if (overlay, obj["kind"], obj["metadata"]["name"]) == ("monitoring-openshift", "ConfigMap", CONSOLE_DASHBOARD):
            assert obj["metadata"]["namespace"] == "openshift-config-managed"  # where the console reads them
        elif obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == "mpijob-webhook", f"{obj['kind']}/{obj['metadata']['name']}"


def test_the_monitoring_overlay_adds_only_monitoring(overlays: dict[str, list[Object]]) -> None:
    monitoring = {("ServiceMonitor", "mpijob-webhook"), ("PrometheusRule", "mpijob-webhook"),
                  ("ConfigMap", "mpijob-webhook-grafana-dashboard")}
    assert kinds_and_names(overlays["monitoring"]) == monitoring
    assert kinds_and_names(overlays["monitoring-openshift"]) == monitoring | {("ConfigMap", CONSOLE_DASHBOARD)}
