"""The policy file, watched: what ``Admission.policy`` returns, kept current without a restart.

A ConfigMap mounted as a volume is updated by the kubelet atomically: the new files go into a
fresh hidden directory and the ``..data`` symlink is swapped to it, so ``policy.yaml`` (itself a
symlink through ``..data``) suddenly resolves to a new inode. A background thread in every
worker process stats the file every few seconds and re-reads it when its identity (device,
inode, size, mtime) changes; requests never touch the filesystem.

What can go wrong, and what happens then:

- the new content is invalid: the last good policy stays in force; the error (with its field
  path) is logged, shown on ``/readyz`` and counted in ``mpijob_webhook_policy_reloads_total``
  and ``mpijob_webhook_policy_last_reload_successful``. The server stays ready: refusing
  traffic because of a typo would turn a policy mistake into a cluster-wide outage.
- the file disappears: the last good policy stays in force (and it is said so) until it is back.
- the file is invalid at start-up: ``serve`` refuses to start (``load_at_startup``).
- a worker (re)started while the file is invalid or gone serves the last good policy, the one
  the running workers serve: every successful load is kept where all the workers of the server
  can read it (``webhook.last_good_policy``), and a new worker falls back on that.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from policies.config import PolicyError, PolicyProblem
from policies.config.layered_policy import DEFAULT_WEBHOOK_NAMESPACE, Policy
from policies.config.reader import default_policy, parse_policy
from webhook.input_files import UnreadablePolicyFile, missing
from webhook.last_good_policy import KeptPolicy, LastGoodPolicy
from webhook.runtime import Runtime

log = logging.getLogger(__name__)

DEFAULT_CHECK_SECONDS = 2.0
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

# Policies validated by ``serve`` before gunicorn forks; workers inherit this and fall back on it
# when nothing was kept in the server's last-good store (or there is none).
_startup_policies: dict[Path, Policy] = {}
# The last-good store of each policy file, made by ``serve`` before gunicorn forks.
_stores: dict[Path, LastGoodPolicy] = {}

ReloadRecorder = Callable[..., None]


def own_namespace() -> str:
    """The namespace the webhook runs in: POD_NAMESPACE (downward API), else the mounted
    ServiceAccount's, else the default install namespace."""
    from_env = os.environ.get("POD_NAMESPACE", "").strip()
    if from_env:
        return from_env
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or DEFAULT_WEBHOOK_NAMESPACE
    except OSError:
        return DEFAULT_WEBHOOK_NAMESPACE


def read_policy(path: Path, namespace: str | None = None) -> tuple[Policy, str]:
    """The policy in ``path`` and its content digest. Raises PolicyError for anything that
    keeps it from being used, a missing or unreadable file included."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _unreadable(path, exc) from None
    return _parse(data, path, namespace)


def _unreadable(path: Path, exc: OSError) -> PolicyError:
    return UnreadablePolicyFile(path, exc)


def _parse(data: bytes, path: Path, namespace: str | None) -> tuple[Policy, str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError([PolicyProblem("", f"is not UTF-8 text (byte {exc.start})")], str(path)) from None
    policy = parse_policy(text, source=str(path), own_namespace=namespace or own_namespace())
    return policy, hashlib.sha256(data).hexdigest()[:12]


def load_at_startup(path: Path, keep: LastGoodPolicy | None = None) -> Policy:
    """Validate the policy file before the server starts (raises PolicyError); the workers it
    forks fall back on this policy if the file turns invalid before they read it. With ``keep``
    the workers share their last good policy through it, starting with this one."""
    path = Path(path)
    fingerprint = _fingerprint(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _unreadable(path, exc) from None
    policy, digest = _parse(data, path, None)
    _startup_policies[path] = policy
    if keep is not None:
        _stores[path] = keep
        keep.keep(KeptPolicy(data, digest, time.time(), fingerprint[3] if fingerprint else 0))
    return policy


def _fingerprint(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)  # follows the ..data symlink: a ConfigMap swap shows as a new inode
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class _Loaded:
    policy: Policy
    digest: str | None  # None: the policy ``serve`` validated at start-up, not read here
    at: float
    inherited: bool = False  # from the last-good store: loaded by a worker before this one


class PolicySource:
    """The current policy of one process: ``current()`` for requests, ``refresh()`` to re-read."""

    def __init__(self, path: Path, *, check_seconds: float = DEFAULT_CHECK_SECONDS,
                 fallback: Policy | None = None, namespace: str | None = None,
                 record: ReloadRecorder | None = None, clock: Callable[[], float] = time.time,
                 keep: LastGoodPolicy | None = None) -> None:
        self.path = Path(path)
        self.check_seconds = check_seconds
        self._namespace = namespace
        self._record = record
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fingerprint: tuple[int, int, int, int] | None = None
        self._error: str | None = None
        self._missing = False
        self._refusal: PolicyError | None = None
        self._keep = keep
        self._loaded: _Loaded | None = self._kept() or (_Loaded(fallback, None, clock()) if fallback is not None else None)
        self.refresh()
        if self._loaded is None:
            raise self._refusal or UnreadablePolicyFile(self.path, missing(self.path))

    @classmethod
    def for_serving(cls, path: Path, check_seconds: float = DEFAULT_CHECK_SECONDS) -> PolicySource:
        from webhook import metrics

        return cls(path, check_seconds=check_seconds, fallback=_startup_policies.get(Path(path)),
                   record=metrics.record_policy_reload, keep=_stores.get(Path(path)))

    def _kept(self) -> _Loaded | None:
        """The last good policy some worker of this server loaded, if one was kept."""
        kept = self._keep.read() if self._keep is not None else None
        if kept is None:
            return None
        try:
            policy, _ = _parse(kept.text, self.path, self._namespace)
        except PolicyError as exc:  # kept by a worker of another version of the code, say
            log.warning("the last good policy kept for %s no longer loads: %s", self.path, exc.first_line())
            return None
        return _Loaded(policy, kept.digest, kept.loaded_at, inherited=True)

    # --- the hot path -----------------------------------------------------------------------
    def current(self) -> Policy:
        loaded = self._loaded
        assert loaded is not None  # the constructor refuses to finish without a policy
        return loaded.policy

    # --- watching ---------------------------------------------------------------------------
    def refresh(self) -> str | None:
        """Re-read the file if it changed: "success", "invalid", "missing", or None (no change)."""
        with self._lock:
            fingerprint = _fingerprint(self.path)
            if fingerprint is None:
                return self._gone()
            if fingerprint == self._fingerprint and not self._missing:
                return None
            self._fingerprint = fingerprint
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return self._gone()  # deleted between the stat and the read
            except OSError as exc:
                return self._invalid(_unreadable(self.path, exc))
            try:
                policy, digest = _parse(data, self.path, self._namespace)
            except PolicyError as exc:
                return self._invalid(exc)
            loaded = self._loaded
            if (loaded is not None and not loaded.inherited and loaded.digest == digest and self._error is None
                    and not self._missing):
                return None  # touched, or the same content written again
            self._loaded = _Loaded(policy, digest, self._clock())
            self._share(data, digest, fingerprint[3])
            recovered = self._error is not None or self._missing
            self._error, self._missing = None, False
            log.info("policy %s from %s (sha256 %s, %d override%s)%s",
                     "loaded" if loaded is None or loaded.digest is None or loaded.inherited else "reloaded",
                     self.path, digest,
                     len(policy.overrides), "" if len(policy.overrides) == 1 else "s",
                     "; the earlier problem is resolved" if recovered else "")
            self._report("success", loaded_at=self._loaded.at)
            return "success"

    def _share(self, data: bytes, digest: str, version: int) -> None:
        """Keep what just loaded for workers started later; a failure only loses that."""
        if self._keep is None:
            return
        try:
            self._keep.keep(KeptPolicy(data, digest, self._clock(), version))
        except Exception:  # noqa: BLE001 - this worker serves the new policy whatever happens
            log.exception("keeping the policy from %s for workers started later failed", self.path)

    def _gone(self) -> str | None:
        if self._missing:
            return None
        self._missing, self._fingerprint = True, None
        if self._loaded is None:  # nothing to keep: the constructor turns this into a refusal
            return "missing"
        log.warning("policy file %s is gone; %s stays in force until the file is back",
                    self.path, self._serving())
        self._report("missing")
        return "missing"

    def _invalid(self, exc: PolicyError) -> str:
        self._error = exc.first_line()
        self._missing = False
        if self._loaded is None:  # nothing to keep: the constructor raises it
            self._refusal = exc
            return "invalid"
        serving = self._serving()
        log.error("%s\n%s stays in force; fix the file, it is re-read within %g s",
                  exc.summary(), serving[:1].upper() + serving[1:], self.check_seconds)
        self._report("invalid")
        return "invalid"

    def _serving(self) -> str:
        loaded = self._loaded
        if loaded is None:
            return "no policy"
        if loaded.digest is None:
            return "the policy the server started with"
        if loaded.inherited:
            return (f"the last good policy (loaded at {_when(loaded.at)}, sha256 {loaded.digest}, "
                    "before this worker started)")
        return f"the policy loaded at {_when(loaded.at)} (sha256 {loaded.digest})"

    def _report(self, result: str, **details: float) -> None:
        if self._record is None:
            return
        try:
            self._record(result, **details)
        except Exception:  # noqa: BLE001 - metrics must never stop the policy from loading
            log.exception("recording the policy reload failed")

    def start(self) -> PolicySource:
        """Watch the file from a daemon thread (call in each worker process, after the fork)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._watch, name="policy-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _watch(self) -> None:
        while not self._stop.wait(self.check_seconds):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - the watcher must outlive any surprise
                log.exception("checking the policy file %s failed", self.path)

    # --- reporting --------------------------------------------------------------------------
    def status(self) -> tuple[bool, str]:
        """A readiness check: always ready (a good policy is in force), with what is wrong."""
        serving = self._serving()
        if self._missing:
            return True, (f"policy file {self.path} is missing; {serving} stays in force "
                          "until the file is back")
        if self._error:
            return True, f"serving {serving}; the policy file is invalid and was not applied: {self._error}"
        return True, f"serving {serving} from {self.path}"


def builtin_status() -> tuple[bool, str]:
    return True, "serving the built-in default policy (no --policy-file)"


def attach(runtime: Runtime, path: Path | None, check_seconds: float = DEFAULT_CHECK_SECONDS) -> PolicySource | None:
    """Give ``runtime`` its policy: the watched file, or the built-in defaults without one."""
    if path is None:
        policy = default_policy(own_namespace())
        runtime.admission.policy = lambda: policy
        runtime.readiness_checks["policy"] = builtin_status
        return None
    source = PolicySource.for_serving(path, check_seconds).start()
    runtime.admission.policy = source.current
    runtime.readiness_checks["policy"] = source.status
    return source
