"""Edits of an MPIJob's working copy, shared by the mutations (and how their warnings name the
pod templates).

The working copy shares every map and list with the request object until a mutation writes into
it: a mutation reads the job as usual and writes only into maps ``WorkingCopy.writable`` hands
out, which copies the maps on the way. The request is never modified, a request of any size costs
a few small copies, and the patch follows only the copied maps (``policies.engine.map_diff``).

Every edit creates the maps it needs on the way (a template without ``metadata``, metadata
without ``labels``) and says whether it changed anything, so the engine never has to compare
copies. A value of the wrong type on the way (possible only in a hand-made request; the API
server refuses it later) is left alone rather than overwritten.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from policies.mpijob.reading import REPLICA_TYPES

_T = TypeVar("_T")

Path = tuple[str, ...]
REPLICA_SPECS: Path = ("spec", "mpiReplicaSpecs")
TEMPLATE_PATHS: tuple[tuple[str, Path], ...] = tuple(
    (replica_type, (*REPLICA_SPECS, replica_type, "template")) for replica_type in REPLICA_TYPES)


class WorkingCopy(dict[str, Any]):
    """The job the mutations edit: a copy of the request's top-level map whose values are the
    request's own objects, shared until ``writable`` copies them.

    A map this copy made is reached only through maps it made (each was written into its parent
    by ``writable``), so writing into one never touches the request, and every change lies below
    a map that is not the request's."""

    __slots__ = ("_copies", "_built", "found")

    def __init__(self, request: Mapping[str, Any]) -> None:
        super().__init__(request)
        # The maps this copy made, by id; holding them keeps each id theirs alone.
        self._copies: dict[int, dict[str, Any]] = {}
        # Lists and maps a mutation built for this copy outside ``writable`` (``adopt``), likewise
        self._built: dict[int, object] = {}
        # What a mutation looked up in this copy, kept for the next mutation of the same request;
        # whoever reads an entry checks that it still holds
        self.found: dict[Any, Any] = {}

    def adopt(self, value: _T) -> _T:
        """``value``, a list or map a mutation built for this copy and wrote into a map it holds:
        ``made`` says so from now on, so the next mutation edits it in place instead of copying."""
        self._built[id(value)] = value
        return value

    def made(self, value: object) -> bool:
        """Whether ``value`` is this copy's own (copied by ``writable`` or ``adopt``ed), not the
        request's."""
        return id(value) in self._built or id(value) in self._copies

    def writable(self, path: Path) -> dict[str, Any] | None:
        """The map at ``path``, safe to edit in place: every map on the way that is still the
        request's is replaced by a copy, and a missing (or null) one by an empty map. None, and
        nothing copied or created, when a value on the way is not a map."""
        node, rest = self._own_part(path)
        if rest and _reach(node, rest) is _BLOCKED:
            return None
        return self._copied(node, rest)

    def _set(self, path: Path, key: str, value: Any, keep: bool) -> bool:
        """``set_value`` (``keep``: ``set_default``) in one walk down ``path``: nothing is copied
        unless the value changes."""
        node, rest = self._own_part(path)
        parent = _reach(node, rest)
        if parent is _BLOCKED:
            return False
        current = None if parent is None else parent.get(key)
        if (current is not None) if keep else _same(current, value):
            return False
        self._copied(node, rest)[key] = value
        return True

    def _own_part(self, path: Path) -> tuple[dict[str, Any], Path]:
        """The deepest map along ``path`` that this copy made, and the rest of the path."""
        node: dict[str, Any] = self
        copies = self._copies
        for depth, key in enumerate(path):
            child = node.get(key)
            if child is None or id(child) not in copies:
                return node, path[depth:]
            node = child
        return node, ()

    def _copied(self, node: dict[str, Any], path: Path) -> dict[str, Any]:
        """Below a map this copy made: the maps along ``path`` copied, or created where missing."""
        copies = self._copies
        for key in path:
            child = node.get(key)
            child = node[key] = {} if child is None else dict(child)
            copies[id(child)] = child
            node = child
        return node


def pod_templates(job: Mapping[str, Any]) -> Iterator[tuple[str, Path, dict[str, Any]]]:
    """(replica type, path, pod template) of the Launcher and Worker specs that have a template.

    Other replica types are not run by the operator (the validating rules say so); a missing
    Worker (``runLauncherAsWorker``) or template is nothing to edit.
    """
    replicas = lookup(job, REPLICA_SPECS)
    if not isinstance(replicas, dict):
        return
    for replica_type, path in TEMPLATE_PATHS:
        replica = replicas.get(replica_type)
        template = replica.get("template") if isinstance(replica, dict) else None
        if isinstance(template, dict):
            yield replica_type, path, template


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


def set_value(job: WorkingCopy, path: Path, key: str, value: Any) -> bool:
    """``job[path…][key] = value``, creating missing maps; True when this changed ``job``."""
    return job._set(path, key, value, keep=False)


def set_default(job: WorkingCopy, path: Path, key: str, value: Any) -> bool:
    """Like ``set_value``, but only where ``key`` is absent: an explicit choice is never replaced."""
    return job._set(path, key, value, keep=True)


_BLOCKED = object()


def _reach(node: dict[str, Any], path: Path) -> Any:
    """The map at ``path`` below ``node``; None when a step is missing (or null), ``_BLOCKED``
    when a value on the way is not a map. Read before anything is created, so a refused edit
    leaves no empty maps behind."""
    current: Any = node
    for key in path:
        current = current.get(key)
        if current is None:
            return None
        if not isinstance(current, dict):
            return _BLOCKED
    return current


def _same(current: Any, value: Any) -> bool:
    # True == 1 in Python; in JSON they are different values.
    return current == value and type(current) is type(value)
