"""The control-plane fixture itself: it starts, admits and stores objects, and its API server can
be stopped and started again on the same port and etcd (the fault tests stand on that)."""
from __future__ import annotations

import json

from testing.control_plane import ControlPlane

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def test_a_pod_is_admitted_and_stored_never_run(control_plane: ControlPlane, kube_namespace: str) -> None:
    control_plane.apply([POD], "-n", kube_namespace)
    stored = json.loads(control_plane.kubectl("get", "pod", "p", "-n", kube_namespace, "-o", "json").stdout)
    assert stored["spec"]["serviceAccountName"] == "default"  # ServiceAccount admission ran
    assert stored["status"].get("phase") == "Pending"           # no kubelet


def test_pod_security_admission_runs(control_plane: ControlPlane, kube_namespace: str) -> None:
    control_plane.kubectl("label", "namespace", kube_namespace, "pod-security.kubernetes.io/enforce=restricted")
    refused = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", "-n", kube_namespace,
                                    input=json.dumps(POD), check=False)
    assert refused.returncode == 1
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr


def test_the_api_server_restarts_on_its_port_with_its_data(control_plane: ControlPlane, kube_namespace: str) -> None:
    control_plane.kubectl("create", "configmap", "kept", "-n", kube_namespace)
    control_plane.stop_apiserver()
    assert not control_plane.apiserver_ready()
    control_plane.start_apiserver()
    assert control_plane.kubectl("get", "configmap", "kept", "-n", kube_namespace).returncode == 0
