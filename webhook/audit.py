"""The audit log: one JSON line per admission decision on stdout, for "who submitted what, and
why was it refused" (log collectors pick it up from the container's stdout).

It names the object, the user and which rules fired with which action and at which field path;
it never copies anything out of the object itself (environment values, commands, annotations,
rule messages that quote values), because a job spec routinely carries secrets.
"""
from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TextIO

from webhook.admission import Decision
from webhook.metrics import decision_label

LOG_NAME = "mpijob-webhook.audit"
# One encoder for every line (json.dumps would build one per call); a record is a tree, never
# a cycle, so nothing needs checking for one.
_LINE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)


def record(decision: Decision, now: datetime | None = None) -> dict[str, Any]:
    """The audit record of one decision (a flat, stable JSON object)."""
    req = decision.request
    verdict = decision.verdict
    mutation = decision.mutation
    when = now or datetime.now(timezone.utc)
    entry: dict[str, Any] = {
        "log": LOG_NAME,
        "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "uid": req.uid,
        "user": {"username": req.user.username, "groups": list(req.user.groups)},
        "namespace": req.namespace,
        "name": req.name,
        "kind": {"group": req.group, "version": req.version, "kind": req.kind},
        "operation": req.operation,
        "dryRun": req.dry_run,
        "endpoint": decision.endpoint,
        "decision": decision_label(decision),
        "reason": decision.reason,
        "rules": [
            {"rule": o.finding.rule, "action": o.action.value, "path": o.finding.path}
            for o in (verdict.outcomes if verdict is not None else ())
        ],
        "latencyMs": round(decision.seconds * 1000, 3),
    }
    if req.request_version and req.request_version != req.version:
        entry["requestVersion"] = req.request_version
    if req.sub_resource:
        entry["subResource"] = req.sub_resource
    if verdict is not None and verdict.skipped:
        entry["skippedRules"] = list(verdict.skipped)
    if mutation is not None:
        entry["mutations"] = list(mutation.applied)
        entry["patchOperations"] = decision.patch_ops
        entry["rules"] += [{"rule": f.rule, "action": "deny", "path": f.path} for f in mutation.invalid]
    if (verdict is not None and verdict.error) or (mutation is not None and mutation.error):
        # Which rule failed, never the exception text (it may quote the object).
        failed = (verdict.error if verdict is not None and verdict.error else mutation.error or "")  # type: ignore[union-attr]
        entry["error"] = failed.split(":", 1)[0]
    return entry


class AuditLog:
    """An ``Admission`` observer writing ``record(decision)`` as one line to ``stream``."""

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], datetime] | None = None) -> None:
        self._stream = stream
        self._clock = clock
        self._lock = threading.Lock()  # whole lines, even from many threads

    def __call__(self, decision: Decision) -> None:
        now = self._clock() if self._clock else None
        line = _LINE.encode(record(decision, now)) + "\n"
        stream = self._stream or sys.stdout  # looked up late, so a redirected stdout is honoured
        with self._lock:
            stream.write(line)
            stream.flush()
