"""Least privilege: the webhook reads what its caches watch, and can change nothing."""
from __future__ import annotations

import pytest

from tests.manifests.build import INSTALL_OVERLAYS, Object, find, find_all

READ = {"get", "list", "watch"}
# What the watch caches behind the cluster-aware rules read, and nothing more.
CACHED = {
    ("", "resourcequotas"), ("", "limitranges"), ("", "namespaces"), ("", "nodes"),
    ("kubeflow.org", "mpijobs"), ("kueue.x-k8s.io", "localqueues"),
    ("trainer.kubeflow.org", "clustertrainingruntimes"), ("trainer.kubeflow.org", "trainingruntimes"),
    ("trainer.kubeflow.org", "trainjobs"),
}


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_cluster_role_only_reads_the_cached_resources(overlays: dict[str, list[Object]], overlay: str) -> None:
    role = find(overlays[overlay], "ClusterRole", "mpijob-webhook")
    granted = set()
    for rule in role["rules"]:
        assert set(rule["verbs"]) == READ, rule
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource) and "/" not in resource, rule
                granted.add((group, resource))
    assert granted == CACHED


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_no_other_role_grants_anything(overlays: dict[str, list[Object]], overlay: str) -> None:
    objects = overlays[overlay]
    roles = find_all(objects, "ClusterRole") + find_all(objects, "Role")
    assert [r["metadata"]["name"] for r in roles] == ["mpijob-webhook"]
    assert find_all(objects, "RoleBinding") == []


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_the_binding_is_for_the_pods_service_account(overlays: dict[str, list[Object]], overlay: str) -> None:
    objects = overlays[overlay]
    binding = find(objects, "ClusterRoleBinding", "mpijob-webhook")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "mpijob-webhook"}
    deployment = find(objects, "Deployment", "mpijob-webhook")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    find(objects, "ServiceAccount", account)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                    "namespace": deployment["metadata"]["namespace"]}]
