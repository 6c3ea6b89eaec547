"""The audit log: one JSON line per admission decision on stdout, for "who submitted what, and
why was it refused" (log collectors pick it up from the container's stdout).

It names the object, the user and which rules fired with which action and at which field path;
it never copies anything out of the object itself (environment values, commands, annotations,
rule messages that quote values), because a job spec routinely carries secrets.

Lines are buffered: a decision appends its line in memory, and a daemon thread writes what has
gathered every ``WRITE_SECONDS`` (0.1 s) in one write, or the request that fills the buffer past
``MAX_PENDING_CHARS`` writes it at once (so the buffer stays bounded, and a stalled stdout slows
requests down rather than growing memory). ``flush()`` writes at once; a gunicorn worker flushes
as it exits (``worker_exit``), and so does the interpreter (atexit). What a SIGKILL or a crash of
the process can lose is the last 0.1 s of lines, the same trade batched audit backends make (the
API server's own batch audit backend, log shippers): a write and flush per request would cost a
system call on every request for a window a log collector's own buffering already has. Lines
stay in order within a process; the workers of one server write their batches independently,
so across workers the order is by batch (every line carries its time).
"""
from __future__ import annotations

import json
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TextIO

from webhook.admission import Decision
from webhook.client_auth import Refusal
from webhook.flushing import PeriodicFlush
from webhook.metrics import decision_label, record_escaped_audit_line

log = logging.getLogger(__name__)

LOG_NAME = "mpijob-webhook.audit"
WRITE_SECONDS = 0.1
MAX_PENDING_CHARS = 64 * 1024
# A string as json.dumps(..., ensure_ascii=False) writes it.
_string = json.encoder.encode_basestring  # type: ignore[attr-defined]


def line(decision: Decision, now: datetime | None = None) -> str:
    """The audit record of one decision: a flat, stable JSON object on one line (no newline).

    Written out directly, exactly as ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)``
    would write it, at half the cost of building the dict and encoding it."""
    req = decision.request
    verdict = decision.verdict
    mutation = decision.mutation
    # An Action is a str: its JSON is its value's, without the slower ``.value`` lookup.
    rules = [_rule(o.finding.rule, o.action, o.finding.path) for o in verdict.outcomes] if verdict is not None else []
    if mutation is not None:
        rules += [_rule(f.rule, "deny", f.path) for f in mutation.invalid]
    text = (
        f'{{"log":{_string(LOG_NAME)},'
        f'"time":{_string(_timestamp(now))},'
        f'"uid":{_string(req.uid)},'
        f'"user":{{"username":{_string(req.user.username)},"groups":{_strings(req.user.groups)}}},'
        f'"namespace":{_string(req.namespace)},"name":{_string(req.name)},'
        f'"kind":{{"group":{_string(req.group)},"version":{_string(req.version)},"kind":{_string(req.kind)}}},'
        f'"operation":{_string(req.operation)},"dryRun":{_boolean(req.dry_run)},'
        f'"endpoint":{_string(decision.endpoint)},"decision":{_string(decision_label(decision))},'
        f'"reason":{_string(decision.reason)},"rules":[{",".join(rules)}],'
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


def refusal_line(refusal: Refusal, now: datetime | None = None) -> str:
    """The audit record of a refused client: no uid or user (the body was never read), the
    endpoint, why, and who connected."""
    return (
        f'{{"log":{_string(LOG_NAME)},'
        f'"time":{_string(_timestamp(now))},'
        f'"endpoint":{_string(refusal.endpoint)},"decision":"refused","code":{refusal.code},'
        f'"reason":{_string(refusal.reason)},"message":{_string(refusal.message)},'
        f'"client":{{"address":{_string(refusal.peer)},"certificate":{_string(refusal.subject)}}}}}'
    )


def _rule(rule: str, action: str, path: str) -> str:
    return f'{{"rule":{_string(rule)},"action":{_string(action)},"path":{_string(path)}}}'


def record(decision: Decision, now: datetime | None = None) -> dict[str, Any]:
    """The audit record of one decision, decoded."""
    return json.loads(line(decision, now))  # type: ignore[no-any-return]


_this_second: tuple[int, str] = (-1, "")  # a second since the epoch, and how it is written
_MILLISECONDS = tuple(f".{ms:03d}Z" for ms in range(1000))  # a lookup is cheaper than formatting


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
    return formatted[1] + _MILLISECONDS[int((current - second) * 1000)]


def _strings(values: Iterable[str]) -> str:
    return f"[{','.join(map(_string, values))}]"


def _boolean(value: bool) -> str:
    return "true" if value else "false"


class AuditLog:
    """An ``Admission`` observer writing ``line(decision)`` to ``stream`` (default: whatever
    ``sys.stdout`` is when the decision is made), buffered as the module docstring says."""

    _target: Any  # the stream the pending lines go to
    _lines: list[str]
    _chars: int
    _earlier: list[tuple[TextIO, list[str]]]  # lines for a stream replaced since

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], datetime] | None = None) -> None:
        self._stream = stream
        self._clock = clock
        self._forget()
        _logs.add(self)

    def __call__(self, decision: Decision) -> None:
        self._append(line(decision, self._clock() if self._clock else None))

    def refused(self, refusal: Refusal) -> None:
        """A client refused by client authentication (``webhook.client_auth``)."""
        self._append(refusal_line(refusal, self._clock() if self._clock else None))

    def _append(self, text: str) -> None:
        if not text.isascii():  # (C speed) a line of ASCII can be written to any stream
            text = _utf8(text)
        stream = self._stream or sys.stdout  # looked up late, so a redirected stdout is honoured
        with self._lock:
            if stream is not self._target:
                self._earlier.append((self._target, self._lines))
                self._target, self._lines, self._chars = stream, [], 0
            self._lines.append(text)
            self._chars += len(text)
            full = self._chars > MAX_PENDING_CHARS
        if full:
            self.flush()
        elif not _writer.running:
            _writer.start()

    def flush(self) -> None:
        """Write every line logged so far, in order, each batch in one write."""
        with self._write_lock:  # batches taken in order are written in order
            with self._lock:
                batches = [*self._earlier, (self._target, self._lines)]
                self._earlier, self._lines, self._chars = [], [], 0
            for stream, lines in batches:
                if lines:
                    _write(stream, lines)
                    stream.flush()

    def _forget(self) -> None:
        """Start empty (also in a forked child: what was pending belongs to the parent)."""
        self._lock = threading.Lock()  # the pending lines
        self._write_lock = threading.Lock()
        self._target = None  # the stream the pending lines go to
        self._lines = []
        self._chars = 0
        self._earlier = []  # lines for a stream replaced since


def _utf8(text: str) -> str:
    """``text``, or, if it cannot be encoded as UTF-8 (a lone surrogate, which the parser
    refuses, yet a line must never depend on that), the same record with every non-ASCII
    character escaped: still one valid JSON line, readable back to the same values."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _escaped(text)
    return text


def _escaped(text: str) -> str:
    """The line written with ASCII only (JSON ``\\u`` escapes), counted: whatever the stream's
    encoding, it can be written."""
    record_escaped_audit_line()
    return json.dumps(json.loads(text), separators=(",", ":"))


def _write(stream: TextIO, lines: list[str]) -> None:
    """Whole lines, in one write per batch; if the stream cannot encode the batch (a stdout
    that is not UTF-8), line by line, each line it cannot encode escaped: one line must never
    take the others with it."""
    try:
        stream.write("\n".join(lines) + "\n")
        return
    except UnicodeEncodeError:  # raised before anything of the batch is written
        pass
    for text in lines:
        try:
            stream.write(text + "\n")
        except UnicodeEncodeError:
            stream.write(_escaped(text) + "\n")


_logs: weakref.WeakSet[AuditLog] = weakref.WeakSet()


def flush() -> None:
    """Write what every audit log of this process holds (a gunicorn worker, as it exits)."""
    for audit_log in list(_logs):
        try:
            audit_log.flush()
        except (OSError, ValueError):  # a closed or broken stream: its lines are lost, not the others'
            log.exception("audit log write failed")


def _forget_pending() -> None:
    for audit_log in list(_logs):
        audit_log._forget()


_writer = PeriodicFlush("audit-log-writer", WRITE_SECONDS, flush, forget=_forget_pending)
