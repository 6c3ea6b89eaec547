"""Server processes the tests and benchmarks start die with the process that started them.

A server is started in a session (and process group) of its own, so that it and its workers are
stopped together (``os.killpg``). Stopped by whom, though, when the Python process that started
it is killed (SIGKILL, an out-of-memory kill, a CI runner's timeout)? No ``finally`` and no
``atexit`` runs then, and the servers would live on, holding ports and CPU. So:

- ``die_with_parent`` asks Linux to signal the child when its parent goes
  (``prctl(PR_SET_PDEATHSIG)``), called in the child before it runs anything (``preexec_fn`` of
  ``subprocess.Popen``, or first thing in a forked child). SIGTERM: gunicorn's master then stops
  its workers itself. Linux sends it when the *thread* that started the child ends: start
  servers from a thread that outlives them (the main thread). Elsewhere it does nothing;
- ``stop_group_at_exit`` kills the process group of a server still running when the interpreter
  exits normally without having stopped it (an exception between start and ``with``).
"""
from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` (or the first call of a forked child) after which the child gets ``sig``
    when the process calling this now dies. The libc function is looked up here, in the parent:
    the child, between fork and exec, only calls it."""
    parent = os.getpid()

    def arm() -> None:
        if _prctl is None:
            return
        _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request was made: nobody would signal
            os.kill(os.getpid(), sig)

    return arm


def both(*steps: Callable[[], None] | None) -> Callable[[], None]:
    """One ``preexec_fn`` running each of ``steps`` (None: skipped) in turn."""
    def run() -> None:
        for step in steps:
            if step is not None:
                step()
    return run


_running: dict[int, subprocess.Popen[bytes]] = {}


def stop_group_at_exit(process: subprocess.Popen[bytes]) -> None:
    """Kill ``process``'s group (it leads one: ``start_new_session``) when this interpreter exits
    with it still running; ``forget`` it once it is stopped."""
    _running[process.pid] = process


def forget(process: subprocess.Popen[bytes]) -> None:
    _running.pop(process.pid, None)


@atexit.register
def _stop_the_rest() -> None:
    for process in list(_running.values()):
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
    _running.clear()
