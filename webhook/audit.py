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
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TextIO

from webhook.admission import Decision
from webhook.metrics import decision_label

LOG_NAME = "mpijob-webhook.audit"
# A string as json.dumps(..., ensure_ascii=False) writes it.
_string = json.encoder.encode_basestring  # type: ignore[attr-defined]


def line(decision: Decision, now: datetime | None = None) -> str:
    """The audit record of one decision: a flat, stable JSON object on one line (no newline).

    Written out directly, exactly as ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)``
    would write it, at half the cost of building the dict and encoding it."""
    req = decision.request
    verdict = decision.verdict
    mutation = decision.mutation
    fired = [(o.finding.rule, o.action.value, o.finding.path) for o in verdict.outcomes] if verdict is not None else []
    if mutation is not None:
        fired += [(f.rule, "deny", f.path) for f in mutation.invalid]
    rules = ",".join(f'{{"rule":{_string(rule)},"action":{_string(action)},"path":{_string(path)}}}'
                     for rule, action, path in fired)
    text = (
        f'{{"log":{_string(LOG_NAME)},'
        f'"time":{_string(_timestamp(now))},'
        f'"uid":{_string(req.uid)},'
        f'"user":{{"username":{_string(req.user.username)},"groups":{_strings(req.user.groups)}}},'
        f'"namespace":{_string(req.namespace)},"name":{_string(req.name)},'
        f'"kind":{{"group":{_string(req.group)},"version":{_string(req.version)},"kind":{_string(req.kind)}}},'
        f'"operation":{_string(req.operation)},"dryRun":{_boolean(req.dry_run)},'
        f'"endpoint":{_string(decision.endpoint)},"decision":{_string(decision_label(decision))},'
        f'"reason":{_string(decision.reason)},"rules":[{rules}],'
        f'"latencyMs":{round(decision.seconds * 1000, 3)!r}'
    )
    if req.request_version and req.request_version != req.version:
        text += f',"requestVersion":{_string(req.request_version)}'
    if req.sub_resource:
        text += f',"subResource":{_string(req.sub_resource)}'
    if verdict is not None and verdict.skipped:
        text += f',"skippedRules":{_strings(verdict.skipped)}'
    if mutation is not None:
        text += f',"mutations":{_strings(mutation.applied)},"patchOperations":{decision.patch_ops!r}'
    if (verdict is not None and verdict.error) or (mutation is not None and mutation.error):
        # Which rule failed, never the exception text (it may quote the object).
        failed = (verdict.error if verdict is not None and verdict.error else mutation.error or "")  # type: ignore[union-attr]
        text += f',"error":{_string(failed.split(":", 1)[0])}'
    return text + "}"


def record(decision: Decision, now: datetime | None = None) -> dict[str, Any]:
    """The audit record of one decision, decoded."""
    return json.loads(line(decision, now))  # type: ignore[no-any-return]


_this_second: tuple[int, str] = (-1, "")  # a second since the epoch, and how it is written


def _timestamp(now: datetime | None) -> str:
    """``now``, or the current time, in UTC to the millisecond: 2026-03-01T12:30:45.123Z."""
    if now is not None:
        return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    global _this_second
    current = time.time()
    second = int(current)
    formatted = _this_second
    if formatted[0] != second:  # the date and time of day are formatted once a second
        formatted = _this_second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{formatted[1]}.{int((current - second) * 1000):03d}Z"


def _strings(values: Iterable[str]) -> str:
    return f"[{','.join(map(_string, values))}]"


def _boolean(value: bool) -> str:
    return "true" if value else "false"


class AuditLog:
    """An ``Admission`` observer writing ``line(decision)`` to ``stream``."""

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], datetime] | None = None) -> None:
        self._stream = stream
        self._clock = clock
        self._lock = threading.Lock()  # whole lines, even from many threads

    def __call__(self, decision: Decision) -> None:
        now = self._clock() if self._clock else None
        text = line(decision, now) + "\n"
        stream = self._stream or sys.stdout  # looked up late, so a redirected stdout is honoured
        with self._lock:
            stream.write(text)
            stream.flush()
