"""Server processes under test: started as subprocesses (gunicorn master plus workers), waited
for until ready, measured from /proc (CPU time, memory of each worker) and stopped with their
whole process group, also when the process that started them is killed
(``testing.child_processes``)."""
from __future__ import annotations

import http.client
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from testing.child_processes import both, die_with_parent, forget, stop_group_at_exit
from testing.reference_data import ROOT
from testing.tls_server import free_port

START_SECONDS = 60.0
READY_SECONDS = 600.0  # 10,000 namespaces take a while to list through a Python API server
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Memory:
    rss_mib: float  # resident set: what `top` shows, shared pages counted in full
    pss_mib: float  # proportional set: shared pages split between the processes sharing them


class ServerProcess:
    """One server (``serve``, the floor, or a variant) on a free port on 127.0.0.1."""

    def __init__(self, name: str, module_args: list[str], workdir: Path, ca_file: Path,
                 cpus: set[int] | None = None, *, tree: Path = ROOT, health_port: bool = True,
                 launcher: Sequence[str] = (), environment: Mapping[str, str] | None = None) -> None:
        """``tree``: the source tree whose modules the server runs (another checkout: its modules
        come first on the path); ``health_port=False`` for a server without ``--health-port``;
        ``launcher``: a command the interpreter runs under (valgrind); ``environment``: variables
        added to this process's."""
        self.name = name
        self.port = free_port()
        self.health_port = free_port()  # plain HTTP: /healthz, /readyz, /metrics
        self.ca_file = ca_file
        self.log = workdir / f"{name}.log"
        self._cpus = cpus
        self._tree = tree
        self._environment = dict(environment or {})
        self._args = [*launcher, sys.executable, "-m", *module_args, "--host", "127.0.0.1", "--port", str(self.port),
                      *(("--health-port", str(self.health_port)) if health_port else ())]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, ready_path: str = "/readyz") -> ServerProcess:
        self.spawn()
        self.wait_until_ready(ready_path)
        return self

    def spawn(self, *, pinned: bool = True) -> ServerProcess:
        """The process started, not waited for: servers spawned one after the other start
        side by side (``wait_until_ready`` each before use). ``pinned=False``: on any CPU until
        ``pin``."""
        cpus = self._cpus if pinned else None
        with self.log.open("wb") as sink:  # the audit log and the server's own lines
            self.process = subprocess.Popen(
                self._args, cwd=self._tree, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=both(die_with_parent(), (lambda: os.sched_setaffinity(0, cpus)) if cpus else None),
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self._environment,
                     **({"PYTHONPATH": str(self._tree)} if self._tree != ROOT else {})},
            )
        stop_group_at_exit(self.process)
        return self

    def wait_until_ready(self, path: str = "/readyz") -> None:
        deadline = time.monotonic() + READY_SECONDS
        started = time.monotonic()
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.output()[-4000:]}")
            try:
                if self.get(path) == 200:
                    return
            except (OSError, http.client.HTTPException):
                if time.monotonic() - started > START_SECONDS and not self.workers():
                    break
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer {path} with 200:\n{self.output()[-4000:]}")

    def pin(self) -> None:
        """Every thread of the master and of its workers moved to the server's CPUs. Threads and
        workers started later inherit it from the thread that starts them, which is moved too."""
        if not self._cpus or self.process is None:
            return
        for pid in (self.process.pid, *self.workers()):
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue  # a worker that has just exited
            for thread in threads:
                try:
                    os.sched_setaffinity(int(thread), self._cpus)
                except OSError:
                    continue

    def get(self, path: str) -> int:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=5)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    # --- measuring --------------------------------------------------------------------------
    def workers(self) -> list[int]:
        """The gunicorn worker processes (children of the master)."""
        if self.process is None:
            return []
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text()
        except OSError:
            return []
        return [int(pid) for pid in children.split()]

    def cpu_seconds(self) -> float:
        """CPU time of the master and every worker so far."""
        assert self.process is not None
        total = 0
        for pid in (self.process.pid, *self.workers()):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / CLOCK_TICKS

    def worker_memory(self) -> list[Memory]:
        memory = []
        for pid in self.workers():
            values = {}
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
                key, _, rest = line.partition(":")
                values[key] = int(rest.split()[0]) / 1024
            memory.append(Memory(values.get("Rss", 0.0), values.get("Pss", 0.0)))
        return memory

    # --- stopping ---------------------------------------------------------------------------
    def stop(self) -> None:
        self.stop_soon()
        self.wait_stopped()

    def stop_soon(self) -> None:
        """Tells the server to stop, without waiting for it (``wait_stopped``): several servers
        stop side by side."""
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()  # gunicorn stops its workers, then itself

    def wait_stopped(self) -> None:
        process = self.process
        if process is None:
            return
        try:
            process.wait(timeout=25)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        forget(process)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
