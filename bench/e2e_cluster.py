"""The real API server's side of ``bench e2e``: an admin connection kept alive, the MPIJob CRD
and the namespace the jobs go to, and the four ways of admitting a job registered one at a time:
nothing, the exported ValidatingAdmissionPolicies, or one ValidatingWebhookConfiguration (the
manifests' own, pointed at a local server by ``clientConfig.url`` and ``caBundle``).

The API server learns of a registration through its informers, a moment after the write. A
switch is only done when a probe shows it: a job every policy of ours refuses (two launchers),
created dry-run, refused by the policies or by our webhook, and admitted otherwise; the API
server's own metrics (``apiserver_admission_webhook_admission_duration_seconds_count`` per
webhook name) show which webhook was called, and that no other one was.
"""
from __future__ import annotations

import base64
import copy
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testing.control_plane import ControlPlane
from testing.reference_data import ROOT, UPSTREAM, load_yaml_documents

NAMESPACE = "bench"
JOB_FILE = UPSTREAM / "v2beta1" / "pi.yaml"
JOBS_PATH = f"/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs"
DRY_RUN_CREATE = f"{JOBS_PATH}?dryRun=All"
CRD_FILE = UPSTREAM / "crd" / "mpijobs-v2beta1.yaml"
WEBHOOKS_FILE = ROOT / "manifests" / "base" / "webhooks.yaml"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
WEBHOOK_CONFIGURATIONS = f"{ADMISSION}/validatingwebhookconfigurations"
POLICIES = f"{ADMISSION}/validatingadmissionpolicies"
BINDINGS = f"{ADMISSION}/validatingadmissionpolicybindings"
BENCH_LABEL = "bench.mpijob-webhook.kubeflow.org/e2e"
WEBHOOK_CALLS = "apiserver_admission_webhook_admission_duration_seconds_count{"
SWITCH_TIMEOUT = 60.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
COMPILE_ERROR = re.compile(r"ERROR: <input>:\d+:\d+: ([^\n]*)")


class AdminConnection:
    """One kept-alive HTTPS connection to the API server, as its admin (client certificate)."""

    def __init__(self, plane: ControlPlane) -> None:
        self._port = plane.apiserver_port
        self._context = ssl.create_default_context(cafile=str(plane.ca_file))
        self._context.load_cert_chain(*admin_cert(plane))
        self._connection: http.client.HTTPSConnection | None = None

    def request(self, method: str, path: str, document: Any = None) -> tuple[int, bytes]:
        body = None if document is None else (document if isinstance(document, bytes) else json.dumps(document).encode())
        for attempt in (1, 2):  # once again on a fresh connection when the kept one was closed
            if self._connection is None:
                self._connection = http.client.HTTPSConnection("127.0.0.1", self._port, context=self._context,
                                                               timeout=60)
            try:
                self._connection.request(method, path, body, {"Content-Type": "application/json",
                                                              "Accept": "application/json"})
                response = self._connection.getresponse()
                return response.status, response.read()
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def must(self, method: str, path: str, document: Any = None, ok: tuple[int, ...] = (200, 201)) -> bytes:
        status, answer = self.request(method, path, document)
        if status not in ok:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {answer[:2000].decode(errors='replace')}")
        return answer

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def admin_cert(plane: ControlPlane) -> tuple[str, str]:
    return str(plane.pki / "admin.crt"), str(plane.pki / "admin.key")


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU time of one process (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def job_body() -> bytes:
    return json.dumps(load_yaml_documents(JOB_FILE)[0], separators=(",", ":")).encode()


def refused_probe() -> dict[str, Any]:
    """The measured job with two launchers: refused by our policy (``launcher``), whether the
    webhook or the exported policies enforce it; admitted by the API server alone."""
    job = copy.deepcopy(load_yaml_documents(JOB_FILE)[0])
    job["metadata"]["name"] = "probe"
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    return job


def install_crd(plane: ControlPlane, api: AdminConnection) -> None:
    """The upstream MPIJob CRD (server-side apply: it is over 256 KiB) and the namespace, once MPIJobs can be created."""
    plane.apply(CRD_FILE.read_text())
    api.must("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
             ok=(201, 409))
    deadline = time.monotonic() + SWITCH_TIMEOUT
    while api.request("POST", DRY_RUN_CREATE, job_body())[0] != 201:  # the CRD's REST endpoint is served
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API server does not create MPIJobs: {api.request('POST', DRY_RUN_CREATE, job_body())}")
        time.sleep(0.2)


def webhook_configuration(name: str, webhook_name: str, url: str, ca_file: Path) -> dict[str, Any]:
    """The manifests' ValidatingWebhookConfiguration, named ``name``, calling ``url``."""
    manifest = next(d for d in yaml.safe_load_all(WEBHOOKS_FILE.read_text())
                    if d and d["kind"] == "ValidatingWebhookConfiguration")
    configuration = copy.deepcopy(manifest)
    configuration["metadata"] = {"name": name, "labels": {BENCH_LABEL: "true"}}
    (webhook,) = configuration["webhooks"]
    webhook["name"] = webhook_name
    webhook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_file.read_bytes()).decode()}
    return configuration


@dataclass
class ExportedPolicies:
    """``mpijob-webhook export vap`` (default policy): the objects the API server refused (name:
    its reasons, short). The policies stay created (the API server compiles and type-checks each
    when it is written, seconds of its CPU); the bindings switch them on and off."""
    bindings: list[dict[str, Any]] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)

    def install(self, api: AdminConnection) -> None:
        """Every exported object created, noting which are refused; the bindings then removed."""
        done = subprocess.run([sys.executable, "-m", "webhook", "export", "vap", "-o", "json"], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, check=True)
        for item in json.loads(done.stdout)["items"]:
            labelled = copy.deepcopy(item)
            labelled["metadata"].setdefault("labels", {})[BENCH_LABEL] = "true"
            status, answer = api.request("POST", collection(item), labelled)
            if status != 201:
                self.refused[f"{item['kind']} {item['metadata']['name']}"] = _reason(answer)
            elif item["kind"] == "ValidatingAdmissionPolicyBinding":
                self.bindings.append(labelled)
        self.unbind(api)

    def bind(self, api: AdminConnection) -> None:
        for binding in self.bindings:
            api.must("POST", BINDINGS, binding)

    def unbind(self, api: AdminConnection) -> None:
        api.must("DELETE", f"{BINDINGS}?labelSelector={BENCH_LABEL}%3Dtrue")


def collection(item: dict[str, Any]) -> str:
    return BINDINGS if item["kind"] == "ValidatingAdmissionPolicyBinding" else POLICIES


def _reason(answer: bytes) -> str:
    """The API server's reasons, short: each field with its distinct compile errors (the
    expressions themselves, thousands of characters each, left out)."""
    try:
        status = json.loads(answer)
    except ValueError:
        return answer[:300].decode(errors="replace")
    fields: dict[str, list[str]] = {}  # each distinct error: the fields it is in
    for cause in (status.get("details") or {}).get("causes") or []:
        message = cause.get("message", "")
        for error in sorted(set(COMPILE_ERROR.findall(message))) or [message.rsplit('": ', 1)[-1][:200]]:
            fields.setdefault(error, []).append(cause.get("field", ""))
    return "; ".join(f"{error} ({where[0]}" + (f" and {len(where) - 1} more)" if len(where) > 1 else ")")
                     for error, where in fields.items()) or status.get("message", "")[:300]


def webhook_calls(api: AdminConnection) -> Counter[str]:
    """How often the API server has called each webhook (by name), from its /metrics."""
    calls: Counter[str] = Counter()
    for line in api.must("GET", "/metrics").decode().splitlines():
        if line.startswith(WEBHOOK_CALLS):
            labels, _, value = line[len(WEBHOOK_CALLS):].rpartition("} ")
            name = next((label.split("=", 1)[1].strip('"') for label in labels.split(",")
                         if label.startswith("name=")), "")
            calls[name] += int(float(value))
    return calls


def probe(api: AdminConnection) -> str:
    """What the API server does with the refused probe: ``admitted``, or refused by a ``policy``
    or by a ``webhook`` (or ``HTTP <status>`` for anything else)."""
    status, answer = api.request("POST", DRY_RUN_CREATE, refused_probe())
    if status == 201:
        return "admitted"
    message = json.loads(answer).get("message", "") if answer.startswith(b"{") else ""
    if "ValidatingAdmissionPolicy" in message:
        return "policy"
    if "admission webhook" in message:
        return "webhook"
    return f"HTTP {status}: {answer[:300]!r}"


def wait_for(api: AdminConnection, outcome: str, webhook: str | None) -> None:
    """Until the probe's ``outcome`` is as expected twice in a row, with ``webhook`` the only one
    called (None: no webhook called)."""
    deadline = time.monotonic() + SWITCH_TIMEOUT
    in_a_row, seen = 0, ""
    while in_a_row < 2:
        before = webhook_calls(api)
        got = probe(api)
        called = {name for name, count in (webhook_calls(api) - before).items() if count}
        seen = f"probe {got}, webhooks called: {sorted(called) or 'none'}"
        in_a_row = in_a_row + 1 if got == outcome and called == ({webhook} if webhook else set()) else 0
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API server did not switch within {SWITCH_TIMEOUT:.0f}s: expected probe {outcome} "
                               f"and webhooks called {webhook or 'none'}; last {seen}")
        if in_a_row < 2:
            time.sleep(0.1)
