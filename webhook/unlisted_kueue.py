"""Kueue under a ServiceAccount the policy's ``kueueUsernames`` does not name: a warning in the log,
once per identity, with the line to put in the policy file.

The default list names upstream Kueue and the Red Hat build's operator; the Kueue that OpenShift
AI 2.x deploys itself runs in ``redhat-ods-applications``, and a custom install anywhere. Its
updates are then checked like a user's, and a job it admitted can be refused (or held
suspended) with no one told why. An update from a ServiceAccount named
``kueue-controller-manager`` that changes only what Kueue changes is almost surely that
Kueue, but only the admin can say so: the webhook never trusts it by name, it only says which
line would.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable

log = logging.getLogger(__name__)

KUEUE_SERVICE_ACCOUNT = "kueue-controller-manager"  # its name in every Kueue install we know
_SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
# Identities remembered (each warned about once); past this many, no more warnings: a warning
# per namespace that runs such a ServiceAccount would be noise, and memory stays bounded.
MAX_IDENTITIES = 32


def kueue_service_account(username: str) -> bool:
    """``system:serviceaccount:<namespace>:kueue-controller-manager``."""
    if not username.startswith(_SERVICE_ACCOUNT_PREFIX):
        return False
    namespace, _, name = username[len(_SERVICE_ACCOUNT_PREFIX):].partition(":")
    return bool(namespace) and name == KUEUE_SERVICE_ACCOUNT


def policy_line(listed: Iterable[str], username: str) -> str:
    """The ``kueueUsernames`` line that keeps every name listed now and adds ``username``
    (the key replaces the default list, so the line names them all)."""
    names = sorted({*listed, username})
    return f"kueueUsernames: [{', '.join(json.dumps(name) for name in names)}]"


class UnlistedKueue:
    """Remembers which unlisted Kueue identities were warned about, in this process; safe from
    any thread (one check under a lock per such update: rare, Kueue updates a job twice)."""

    def __init__(self, max_identities: int = MAX_IDENTITIES) -> None:
        self._warned: set[str] = set()
        self._max = max_identities
        self._lock = threading.Lock()

    def saw(self, username: str, listed: Iterable[str], what: str) -> bool:
        """An update of ``what`` (kind namespace/name) from ``username``, that changes only what
        Kueue changes, was checked like a user's: warn, unless this identity was warned about
        already (or too many were). Whether it warned."""
        with self._lock:
            if username in self._warned or len(self._warned) >= self._max:
                return False
            self._warned.add(username)
        log.warning(
            "%s was updated by %s changing only what Kueue changes when it starts or stops a job, but the policy's "
            "kueueUsernames does not name it: its updates are checked like a user's, and a job it admitted can be "
            "refused. If it is your Kueue (OpenShift AI 2.x runs its own in redhat-ods-applications), set this line "
            "in the policy file (it replaces the list): %s (said once per identity and worker)",
            what, username, policy_line(listed, username))
        return True
