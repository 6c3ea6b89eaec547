"""The benchmark's server processes (a gunicorn master and its workers, the API server) do not
outlive the process that started them, even when it is killed with SIGKILL (no ``finally``, no
``atexit``): a killed test run leaves no servers holding ports and CPU behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from testing.reference_data import ROOT

# Started in a process of its own, which the test then kills: the floor (the same gunicorn as
# serve, one worker) and the benchmark's API server, their pids printed once both are up.
STARTER = """
import json, sys, time
from pathlib import Path
from bench.cluster import Cluster
from bench.servers import ServerProcess
from certs import authority

workdir = Path(sys.argv[1])
tls = authority.dev_bundle(workdir)
cluster = Cluster(1, workdir / "kubeconfig").__enter__()
server = ServerProcess("floor", ["bench.floor", "--cert-file", str(tls.cert_file), "--key-file", str(tls.key_file),
                                 "--workers", "1", "--threads", "2"], workdir, tls.ca_file).start()
print(json.dumps({"master": server.process.pid, "workers": server.workers(), "cluster": cluster._process.pid}),
      flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_servers_die_when_the_process_that_started_them_is_killed(tmp_path: Path) -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                               text=True)
    pids: list[int] = []
    try:
        assert starter.stdout is not None
        started = json.loads(starter.stdout.readline() or "null")
        assert started is not None, f"the starter exited with {starter.wait()}"
        pids = [started["master"], *started["workers"], started["cluster"]]
        assert len(pids) == 3 and all(running(pid) for pid in pids)
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        deadline = time.monotonic() + 15
        while any(running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in pids if running(pid)] == []
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
        if starter.stdout is not None:
            starter.stdout.close()
        for pid in pids:  # whatever is left, so a failing run leaks nothing either
            if running(pid):
                os.kill(pid, signal.SIGKILL)
