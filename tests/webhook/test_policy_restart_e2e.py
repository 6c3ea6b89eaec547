"""End to end: a worker that gunicorn starts after the policy file turned invalid (killed and
replaced, or all of them after a SIGHUP) serves the last good policy, the one the running workers
serve, not the one the server started with; and its /readyz says which policy it serves and why."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

from testing.builders import admission_review, mpijob
from testing.tls_server import TlsServer, serving
from tests.webhook.configmap_volume import ConfigMapVolume
from tests.webhook.test_policy_e2e import every_worker_logged, wait_for

START = "rules:\n  worker-count: {action: deny, params: {max: 64}}\n"
RELOADED = "rules:\n  worker-count: {action: deny, params: {max: 40}}\n"
INVALID = "rules:\n  worker-count: {action: deny, params: {max: forty}}\n"
WORKERS = 2


def workers(server: TlsServer) -> set[int]:
    pid = server.process.pid
    return {int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def replace_worker(server: TlsServer, pid: int) -> int:
    """SIGKILL one worker (as the OOM killer does); the pid of the worker gunicorn starts for it."""
    others = workers(server) - {pid}
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: len(workers(server) - others - {pid}) == 1, f"a worker to replace {pid}", server)
    [new] = workers(server) - others - {pid}
    wait_for(lambda: f"[{new}] [ERROR] webhook.policy_reload: " in server.output(), f"worker {new} to read the file",
             server)
    return new


def fifty_workers_allowed(server: TlsServer) -> bool:
    return bool(server.review("/validate", admission_review(mpijob(workers=50)))["allowed"])


def test_a_replaced_worker_serves_the_last_good_policy(tmp_path: Path):
    volume = ConfigMapVolume(tmp_path / "config")
    volume.write(START)
    flags = ("--dev", "--workers", str(WORKERS), "--threads", "2", "--policy-file", str(volume.path),
             "--policy-check-interval", "0.1", "--no-audit-log")
    with serving(tmp_path / "server", *flags) as server:
        every_worker_logged(server, "policy loaded from")
        assert fifty_workers_allowed(server)

        volume.write(RELOADED)
        every_worker_logged(server, "policy reloaded from")
        volume.write(INVALID)
        every_worker_logged(server, f"{volume.path} is invalid (1 problem)")

        # Both workers replaced in turn: every request below is answered by a worker that
        # started while the file was invalid.
        replacements = [replace_worker(server, pid) for pid in sorted(workers(server))]
        assert set(replacements) == workers(server)

        # 60 new connections, spread over both workers: all deny, as max 40 says.
        assert [fifty_workers_allowed(server) for _ in range(60)] == [False] * 60
        digest = hashlib.sha256(RELOADED.encode()).hexdigest()[:12]
        for _ in range(10):
            status, body = server.request("GET", "/readyz")
            detail = json.loads(body)["checks"]["policy"]["detail"]
            assert status == 200
            assert detail.startswith("serving the last good policy (loaded at "), detail
            assert f", sha256 {digest}, before this worker started); the policy file is invalid and was not applied: " \
                   in detail, detail
            assert "rules.worker-count.params.max" in detail, detail

        # SIGHUP: gunicorn replaces every worker gracefully; the new ones keep the last good policy.
        os.kill(server.process.pid, signal.SIGHUP)
        wait_for(lambda: len(workers(server)) == WORKERS and not workers(server) & set(replacements),
                 "SIGHUP to replace both workers", server)
        replacements = sorted(workers(server))
        for pid in replacements:
            wait_for(lambda: f"[{pid}] [ERROR] webhook.policy_reload: " in server.output(),
                     f"worker {pid} to read the file", server)
        assert [fifty_workers_allowed(server) for _ in range(20)] == [False] * 20

        # The file fixed: the replacements load it like any worker.
        volume.write(START)
        for pid in replacements:
            wait_for(lambda: f"[{pid}] [INFO] webhook.policy_reload: policy loaded from {volume.path}" in server.output(),
                     f"worker {pid} to load the fixed file", server)
        wait_for(lambda: all(fifty_workers_allowed(server) for _ in range(6)), "max 64 again", server)
    assert not list(Path(tmp_path / "server").glob("mpijob-webhook-policy-*"))  # removed at shutdown
