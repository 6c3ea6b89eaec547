"""The webhook on the real control plane (``testing.control_plane``) as the manifests deploy it: the
manifests' own Namespace, ServiceAccount and RBAC, the upstream MPIJob CRD, the webhook serving
as a local process with a token of that ServiceAccount, and the manifests' webhook
configurations registered with the API server at ``https://127.0.0.1:PORT``.

Only what differs from a cluster install is changed in the registration: ``clientConfig`` (a URL
and the test CA instead of the Service), the configuration names (one per test module), and a
``namespaceSelector`` label, so the webhook is called for the namespaces of the test that
registered it and never for another test's jobs. The rules, failure policy and timeouts are the
manifests'. ``deployed_webhook`` removes the registration however the test ends.
"""
from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from certs.authority import new_ca, new_serving_cert, write_private_key
from testing.control_plane import ControlPlane, kubectl_binary
from testing.reference_data import ROOT
from testing.tls_server import TlsServer, serving

MANIFESTS = ROOT / "manifests" / "base"
MPIJOB_CRD = ROOT / "manifests" / "crd" / "upstream" / "mpijobs.kubeflow.org.yaml"
TRAINER_CRDS = ROOT / "tests" / "data" / "trainer" / "crds"
KUEUE_CRDS = ROOT / "tests" / "data" / "kueue" / "crds"
SERVICE_ACCOUNT = ("mpijob-webhook", "mpijob-webhook")  # namespace, name
RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
REGISTRATION_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
SELECTOR_LABEL = "mpijob-webhook.test/registered-by"
# The optional integrations, by CRD name: not installed, the webhook must still become ready.
OPTIONAL_CRDS = {
    **{f"{plural}.trainer.kubeflow.org": TRAINER_CRDS / f"trainer.kubeflow.org_{plural}.yaml"
       for plural in ("clustertrainingruntimes", "trainingruntimes", "trainjobs")},
    "localqueues.kueue.x-k8s.io": KUEUE_CRDS / "kueue.x-k8s.io_localqueues.yaml",
}


def manifests(kinds: Sequence[str]) -> list[dict[str, Any]]:
    """The objects of these kinds in ``kubectl kustomize manifests/base``, as an admin applies them."""
    built = subprocess.run([kubectl_binary(), "kustomize", str(MANIFESTS)], capture_output=True, text=True,
                           check=True, timeout=60).stdout
    return [doc for doc in yaml.safe_load_all(built) if doc and doc["kind"] in kinds]


def install_crds(plane: ControlPlane, *files: Path) -> None:
    """Apply CRDs and wait until the API server serves them."""
    if not files:
        return
    plane.apply("\n---\n".join(path.read_text() for path in files))
    names = [yaml.safe_load(path.read_text())["metadata"]["name"] for path in files]
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                  *(f"crd/{name}" for name in names))


def remove_crds(plane: ControlPlane, names: Sequence[str]) -> list[str]:
    """Delete these CRDs (and every object of theirs) and wait until they are gone; the names of
    those that were installed, to put back with ``install_crds`` afterwards."""
    present = [name for name in names
               if plane.kubectl("get", "crd", name, check=False).returncode == 0]
    if present:
        plane.kubectl("delete", "crd", *present, "--wait=true", "--timeout=120s")
    return present


@dataclass
class DeployedWebhook:
    plane: ControlPlane
    server: TlsServer
    tag: str  # the value of SELECTOR_LABEL on the namespaces this webhook is called for

    def namespace(self, name: str | None = None) -> str:
        """A new namespace the webhook is called for (with its ``default`` ServiceAccount)."""
        name = name or f"t-{uuid.uuid4().hex[:10]}"
        self.plane.kubectl("create", "namespace", name)
        self.plane.kubectl("label", "namespace", name, f"{SELECTOR_LABEL}={self.tag}")
        self.plane.wait_for_service_account("default", name)
        return name

    def readiness(self) -> tuple[int, dict[str, Any]]:
        status, body = self.server.health_request("/readyz")
        return status, json.loads(body)

    def wait_ready(self, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.readiness()
            if status == 200:
                return body
            if time.monotonic() > deadline:
                raise AssertionError(f"/readyz still {status} after {timeout} s: {body}\n{self.server.output()}")
            time.sleep(0.2)

    def dry_run(self, obj: dict[str, Any], namespace: str) -> subprocess.CompletedProcess[str]:
        """``kubectl apply --dry-run=server``: the API server calls the webhook, nothing is stored."""
        return self.plane.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                                  input=json.dumps(obj), check=False)


@contextmanager
def deployed_webhook(plane: ControlPlane, directory: Path, *flags: str) -> Iterator[DeployedWebhook]:
    """Install the manifests' RBAC and the MPIJob CRD, serve the webhook with the ServiceAccount's
    token (``flags`` added to ``serve``), register it, and take the registration away at the end."""
    plane.apply(manifests(RBAC_KINDS))
    install_crds(plane, MPIJOB_CRD)
    directory.mkdir(parents=True, exist_ok=True)
    ca = new_ca("deployed-webhook-test-ca")
    serving_cert = new_serving_cert(ca, ["localhost"], ["127.0.0.1"])
    (directory / "ca.crt").write_bytes(ca.cert_pem())
    (directory / "tls.crt").write_bytes(serving_cert.cert_pem())
    write_private_key(directory / "tls.key", serving_cert)
    namespace, account = SERVICE_ACCOUNT
    kubeconfig = plane.token_kubeconfig(directory / "kubeconfig", account, namespace)
    tag = uuid.uuid4().hex[:10]
    with serving(directory / "server", "--cert-file", str(directory / "tls.crt"), "--key-file",
                 str(directory / "tls.key"), "--kubeconfig", str(kubeconfig), "--workers", "1", "--threads", "4",
                 *flags, ca_file=directory / "ca.crt") as server:
        registration = registered(manifests(REGISTRATION_KINDS), server.port, ca.cert_pem(), tag)
        try:
            plane.apply(registration)
            yield DeployedWebhook(plane, server, tag)
        finally:
            for obj in registration:
                plane.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False)


def registered(configurations: list[dict[str, Any]], port: int, ca_pem: bytes, tag: str) -> list[dict[str, Any]]:
    """The manifests' webhook configurations pointed at the local process, for ``tag``'s namespaces."""
    out = []
    for configuration in configurations:
        copy = json.loads(json.dumps(configuration))
        copy["metadata"]["name"] = f"{copy['metadata']['name']}-{tag}"
        for hook in copy["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": base64.b64encode(ca_pem).decode()}
            hook["namespaceSelector"].setdefault("matchLabels", {})[SELECTOR_LABEL] = tag
        out.append(copy)
    return out
