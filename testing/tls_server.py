"""The real server for end-to-end tests: ``python3 -m webhook serve`` (gunicorn, TLS) in a
subprocess on a free port, and a small HTTPS client that trusts its CA.

Registered as a pytest plugin in ``tests/conftest.py``, so any test can ask for the
``dev_server`` fixture (one ``serve --dev`` for the whole run: throwaway CA, default policy,
no cluster). For other flags, use ``serving(directory, *flags)`` as a context manager; flags
must include the TLS choice (``--dev`` or ``--cert-file``/``--key-file``) and, without
``--dev``, pass ``ca_file``. The process group is always stopped and nothing is left behind:
the development CA is written under ``directory``.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testing.child_processes import die_with_parent
from testing.reference_data import ROOT

START_TIMEOUT = 30.0
# Longer than the server's own graceful_timeout (20 s, webhook.server): a stop that is slow but
# graceful (a loaded machine) must not be cut short by the test and read as an unclean one.
STOP_TIMEOUT = 35.0
DEV_CA_PREFIX = "development CA: "


@dataclass
class TlsServer:
    port: int
    ca_file: Path
    process: subprocess.Popen[bytes]
    log: Path
    health_port: int = 0  # plain HTTP: /healthz, /readyz, /metrics

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One request on a fresh connection, verified against the server's CA as ``localhost``."""
        connection = http.client.HTTPSConnection("localhost", self.port, context=self.ssl_context(), timeout=10)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def health_request(self, path: str) -> tuple[int, bytes]:
        """GET ``path`` on the plain health port, on a fresh connection."""
        return get_once(http.client.HTTPConnection("127.0.0.1", self.health_port, timeout=10), path)

    def post_json(self, path: str, document: Any) -> tuple[int, Any]:
        status, body = self.request("POST", path, json.dumps(document).encode(),
                                    {"Content-Type": "application/json"})
        return status, json.loads(body)

    def review(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        """POST an AdmissionReview; the ``response`` of the answer (which must be a 200)."""
        status, answer = self.post_json(path, review)
        assert status == 200, (status, answer)
        assert answer["response"]["uid"] == review["request"]["uid"]
        return answer["response"]


def get_once(connection: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
    """One GET on ``connection``, which is closed after it: the status and the body."""
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serving(directory: Path, *flags: str, ca_file: Path | None = None, port: int | None = None) -> Iterator[TlsServer]:
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "server.log"
    port = port or free_port()
    health_port = free_port()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--health-port", str(health_port), *flags],
            cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent(),  # gone with the test run, even when it is killed
            env={**os.environ, "TMPDIR": str(directory)},  # where --dev writes its CA
        )
    try:
        server = _wait_until_serving(process, port, log, ca_file)
        server.health_port = health_port
        yield server
    finally:
        _stop(process)


def _wait_until_serving(process: subprocess.Popen[bytes], port: int, log: Path, ca_file: Path | None) -> TlsServer:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"webhook serve exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        ca_file = ca_file or _printed_ca(log)
        if ca_file is not None:
            server = TlsServer(port, ca_file, process, log)
            try:
                if server.request("GET", "/healthz")[0] == 200:
                    return server
            except (OSError, http.client.HTTPException):
                pass
        time.sleep(0.1)
    pytest.fail(f"webhook serve did not answer /healthz within {START_TIMEOUT}s:\n{log.read_text(errors='replace')}")


def _printed_ca(log: Path) -> Path | None:
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(DEV_CA_PREFIX):
            return Path(line[len(DEV_CA_PREFIX):].strip())
    return None


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM lets gunicorn stop its workers before it exits; if it takes too long, the whole
    process group is killed (the master is not reaped yet, so the group id is still ours)."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    with serving(tmp_path_factory.mktemp("dev-server"), "--dev", "--workers", "1", "--threads", "4") as server:
        yield server
