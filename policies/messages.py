"""How findings read, in one place: for people (``[rule-id] path: message``) and for the API
server (``details.causes`` in its native field-error form, so kubectl prints our denials the
way it prints its own validation errors)."""
from __future__ import annotations

import json
from typing import Any

from policies.base import UNSET, Finding, Problem


# json.dumps(value, ensure_ascii=False) builds an encoder per call; this one is built once.
_as_json = json.JSONEncoder(ensure_ascii=False).encode
# What that encoder does for a string, called directly (the usual value is a string).
_string_as_json = json.encoder.encode_basestring  # type: ignore[attr-defined]
# Looked up once: reading an Enum member off its class is slower than a global.
_POLICY = Problem.POLICY
_VALUED = (Problem.INVALID, Problem.NOT_SUPPORTED, Problem.TYPE_INVALID)


def render_value(value: Any) -> str:
    """A value the way apimachinery's field errors show it: strings quoted, numbers bare."""
    if isinstance(value, str):
        return _string_as_json(value)  # type: ignore[no-any-return]
    if isinstance(value, bool) or value is None:
        return _as_json(value)
    return str(value)


def body(finding: Finding) -> str:
    """The part after the field path: ``Invalid value: 9: must be …``."""
    problem = finding.problem
    if problem is _POLICY:
        return finding.message
    if finding.value is not UNSET and problem in _VALUED:
        return f"{problem.label}: {render_value(finding.value)}: {finding.message}"
    return f"{problem.label}: {finding.message}"


def line(finding: Finding) -> str:
    """One finding as a person reads it: ``[rule-id] field.path: message``."""
    where = f"{finding.path}: " if finding.path else ""
    return f"[{finding.rule}] {where}{body(finding)}"


def cause(finding: Finding) -> dict[str, str]:
    return {
        "reason": finding.problem.cause or "FieldValueForbidden",
        "message": f"[{finding.rule}] {body(finding)}",
        "field": finding.path,
    }


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word if count == 1 else (words or word + 's')}"


# The API server cuts a warning longer than this (and webhook.responses does the same).
WARNING_LIMIT = 256


def fits_warning(rule: str, path: str, message: str) -> bool:
    """Whether ``[rule] path: message`` is short enough to arrive as a whole warning."""
    where = f"{path}: " if path else ""
    return len(f"[{rule}] {where}{message}") <= WARNING_LIMIT
