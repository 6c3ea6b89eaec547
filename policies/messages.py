"""How findings read, in one place: for people (``[rule-id] path: message``) and for the API
server (``details.causes`` in its native field-error form, so kubectl prints our denials the
way it prints its own validation errors); and the "did you mean …?" for names people mistype
(rule ids, parameters, manifest fields)."""
from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from typing import Any

from policies.interface import UNSET, Finding, Problem


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


# --- "did you mean …?" ----------------------------------------------------------------------
def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``word`` was most likely meant to be, if any is close enough.

    Case and the ``-``/``_`` spelling are ignored first (``workerCount`` for ``worker-count``,
    ``max_gpus`` for ``maxGpus``); then ordinary edit similarity decides; last, a known name
    the word starts with (``maxSlots`` for ``max``)."""
    options = list(candidates)
    folded = {_fold(c): c for c in options}
    if _fold(word) in folded:
        return folded[_fold(word)]
    match = difflib.get_close_matches(word.lower(), [c.lower() for c in options], n=1, cutoff=0.6)
    if match:
        return next(c for c in options if c.lower() == match[0])
    # A name that starts with a known one (maxSlots, max_gpus for max): the longest such.
    prefixes = [c for c in options if len(_fold(c)) >= 3 and _fold(word).startswith(_fold(c))]
    return max(prefixes, key=len) if prefixes else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean X?"`` or ``""``, to end a message with."""
    match = closest(word, candidates)
    return f"; did you mean {match}?" if match and match != word else ""


def _fold(word: str) -> str:
    return word.replace("-", "").replace("_", "").lower()
