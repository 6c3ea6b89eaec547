"""In-place edits of an MPIJob's plain-dict form, shared by the mutations (and how their
warnings name the pod templates).

Every edit creates the maps it needs on the way (a template without ``metadata``, metadata
without ``labels``) and says whether it changed anything, so the engine never has to compare
copies. A value of the wrong type on the way (possible only in a hand-made request; the API
server refuses it later) is left alone rather than overwritten.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from policies.jobs import REPLICA_TYPES

Path = tuple[str, ...]


def pod_templates(job: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(replica type, pod template) of the Launcher and Worker specs that have a template.

    Other replica types are not run by the operator (the validating rules say so); a missing
    Worker (``runLauncherAsWorker``) or template is nothing to edit.
    """
    replicas = (job.get("spec") or {}).get("mpiReplicaSpecs") or {}
    for replica_type in REPLICA_TYPES:
        replica = replicas.get(replica_type)
        template = replica.get("template") if isinstance(replica, dict) else None
        if isinstance(template, dict):
            yield replica_type, template


def templates_phrase(replica_types: list[str]) -> str:
    """``the Launcher pod template`` / ``the Launcher and Worker pod templates``."""
    return f"the {' and '.join(replica_types)} pod template{'s' if len(replica_types) > 1 else ''}"


def lookup(obj: Any, path: Path) -> Any:
    """The value at ``path``, or None when any step is missing or not a map."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def set_value(obj: dict[str, Any], path: Path, key: str, value: Any) -> bool:
    """``obj[path…][key] = value``, creating missing maps; True when this changed ``obj``."""
    parent = _parent(obj, path)
    if parent is None or _same(parent.get(key), value):
        return False
    parent[key] = value
    return True


def set_default(obj: dict[str, Any], path: Path, key: str, value: Any) -> bool:
    """Like ``set_value``, but only where ``key`` is absent: an explicit choice is never replaced."""
    if lookup(obj, (*path, key)) is not None:
        return False
    return set_value(obj, path, key, value)


def _parent(obj: dict[str, Any], path: Path) -> dict[str, Any] | None:
    if not _leads_to_map(obj, path):
        return None
    for key in path:
        if obj.get(key) is None:
            obj[key] = {}
        obj = obj[key]
    return obj


def _leads_to_map(obj: Any, path: Path) -> bool:
    """Checked before creating anything, so a refused edit leaves no empty maps behind."""
    for key in path:
        obj = obj.get(key)
        if obj is None:
            return True
        if not isinstance(obj, dict):
            return False
    return True


def _same(current: Any, value: Any) -> bool:
    # True == 1 in Python; in JSON they are different values.
    return current == value and type(current) is type(value)
