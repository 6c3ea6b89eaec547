"""What a conversion has to tell people, and the problem annotation that carries it to /validate.

Conversion must never fail for a well-formed object (a failing conversion blocks reads,
updates and deletes), so an input the old operator refused is still converted, and the refusal
is recorded on the v2beta1 object in ``PROBLEMS_ANNOTATION``. The ``conversion-problem`` rule
reports it on the next write. The record holds a fingerprint of the v2beta1 fields it is about:
once those are changed (the job was fixed in v2beta1), the record is stale and not reported.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from policies.conversion.tree import ABSENT, Path, digest, get, is_mapping

PROBLEMS_ANNOTATION = "mpijob-webhook.kubeflow.org/conversion-problems"


class Severity(StrEnum):
    PROBLEM = "problem"  # the old operator refused the job: recorded, reported by /validate
    ATTENTION = "attention"  # converted faithfully, but the user must act (e.g. sshd in the image)


@dataclass(frozen=True)
class Note:
    severity: Severity
    field: str  # in the form the user wrote: spec.gpus
    message: str
    about: tuple[Path, ...] = ()  # v2beta1 paths the problem concerns (for staleness)
    value: Any = ABSENT  # the offending value, shown like a native field error

    def line(self) -> str:
        value = "" if self.value is ABSENT else f"{json.dumps(self.value)}: "
        return f"{self.field}: {value}{self.message}"


def problem(field: str, value: Any, message: str, *about: Path) -> Note:
    return Note(Severity.PROBLEM, field, message, about, value)


def attention(field: str, message: str) -> Note:
    return Note(Severity.ATTENTION, field, message)


@dataclass(frozen=True)
class RecordedProblem:
    source: str  # the apiVersion the job was written in
    field: str
    message: str
    value: Any = ABSENT


def record(source: str, notes: Sequence[Note], hub: Mapping[str, Any]) -> str | None:
    """The annotation value recording the problems among ``notes`` for the hub object ``hub``."""
    problems = [n for n in notes if n.severity is Severity.PROBLEM]
    if not problems:
        return None
    about = sorted({path for n in problems for path in n.about}, key=repr)
    doc = {
        "source": source,
        "problems": [{"field": n.field, "message": n.message, **({} if n.value is ABSENT else {"value": n.value})}
                     for n in problems],
        "about": [list(p) for p in about],
        "fingerprint": _fingerprint(hub, about),
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def current_problems(job: Mapping[str, Any]) -> list[RecordedProblem]:
    """The recorded problems that still describe ``job``; none if the record is stale or damaged."""
    metadata = job.get("metadata")
    annotations = metadata.get("annotations") if is_mapping(metadata) else None
    raw = annotations.get(PROBLEMS_ANNOTATION) if is_mapping(annotations) else None
    if not isinstance(raw, str):
        return []
    try:
        doc = json.loads(raw)
        about = [tuple(p) for p in doc["about"]]
        if doc["fingerprint"] != _fingerprint(job, about):
            return []
        return [RecordedProblem(str(doc["source"]), str(p["field"]), str(p["message"]), p.get("value", ABSENT))
                for p in doc["problems"]]
    except (ValueError, TypeError, KeyError):
        return []


def _fingerprint(obj: Mapping[str, Any], paths: Iterable[Path]) -> str:
    return digest([digest(get(obj, path)) for path in paths])
