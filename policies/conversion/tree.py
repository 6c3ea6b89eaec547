"""Reading and copy-on-write editing of decoded JSON trees, for the converters.

Conversion runs on every write and every cache relist, so converters never deep-copy an
object: the output shares every subtree it does not change with the input, and an edit copies
only the containers on the way down to it (``Tree``). Nothing here mutates its input.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

Path = tuple[str | int, ...]


class _Absent:
    """A field that is not there, as distinct from one holding ``null``."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


def is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, without the ABC machinery for the plain dicts that decoded
    JSON is made of (the converters ask this for every node they look at)."""
    return isinstance(value, dict) or isinstance(value, Mapping)


def get(root: Any, path: Path) -> Any:
    """The value at ``path``, or ABSENT when any step is missing or of the wrong kind."""
    node = root
    for step in path:
        if isinstance(step, str):
            if not (isinstance(node, dict) or isinstance(node, Mapping)):
                return ABSENT
            node = node.get(step, ABSENT)
            if node is ABSENT:
                return ABSENT
        else:
            if not isinstance(node, list) or not 0 <= step < len(node):
                return ABSENT
            node = node[step]
    return node


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one: converters read defensively."""
    return value if isinstance(value, dict) or isinstance(value, Mapping) else {}


def integer(value: Any) -> int | None:
    """``value`` when it is a JSON integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False), without building
# an encoder per call.
_canonical_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def canonical(value: Any) -> str:
    """``value`` as canonical JSON (sorted keys, no spaces). Strings, integers, booleans and
    null, most of what gets fingerprinted, are spelled here as ``json`` spells them: its
    encoder costs more to set up than to run on one scalar."""
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    return _canonical_json(value)


def digest(value: Any) -> str:
    """A short fingerprint of a JSON value (or of ABSENT) for "is it still what it was" checks."""
    if value is ABSENT:
        return "-"
    return hashlib.blake2b(canonical(value).encode(), digest_size=8).hexdigest()


def display(path: Path) -> str:
    """A path the way the rules print field paths: ``spec.mpiReplicaSpecs[Worker].template.spec.containers[0]``."""
    out = ""
    for index, step in enumerate(path):
        if isinstance(step, int) or (index and path[index - 1] == "mpiReplicaSpecs"):
            out += f"[{step}]"  # replica types as in spec.mpiReplicaSpecs[Worker], like the rules
        else:
            out += f".{step}" if out else step
    return out


class Tree:
    """Copy-on-write edits of a JSON tree: the first write below a container copies it (and
    only it) once; untouched subtrees stay shared with the original."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root: dict[str, Any] = dict(root)
        self._owned: set[int] = {id(self.root)}

    def _own(self, parent: Any, step: str | int, *, create: bool) -> Any:
        """The child at ``step`` of an owned ``parent``, made owned (copied) if it is not yet."""
        child = parent[step] if (isinstance(step, int) or step in parent) else ABSENT
        if child is ABSENT:
            if not create:
                return ABSENT
            child = {}
        elif not isinstance(child, (Mapping, list)):
            return ABSENT  # a scalar (or null) in the way is data, never overwritten
        elif id(child) in self._owned:
            return child
        else:
            child = dict(child) if isinstance(child, Mapping) else list(child)
        parent[step] = child
        self._owned.add(id(child))
        return child

    def _parent(self, path: Path, *, create: bool) -> Any:
        node: Any = self.root
        for index, step in enumerate(path[:-1]):
            if isinstance(step, int):
                if not isinstance(node, list) or not 0 <= step < len(node):
                    return ABSENT  # never invent list elements
            elif not isinstance(node, dict):
                return ABSENT
            # Only maps are created, and only where a key (not a list index) comes next.
            node = self._own(node, step, create=create and isinstance(path[index + 1], str))
            if node is ABSENT:
                return ABSENT
        return node

    def set(self, path: Path, value: Any) -> bool:
        """Set ``path`` to ``value``, creating missing maps on the way; False if it cannot be
        reached (a missing list element, or a scalar in the way)."""
        parent = self._parent(path, create=True)
        last = path[-1]
        if isinstance(last, int):
            if not isinstance(parent, list) or not 0 <= last < len(parent):
                return False
        elif not isinstance(parent, dict):
            return False
        parent[last] = value
        return True

    def remove(self, path: Path) -> None:
        parent = self._parent(path, create=False)
        last = path[-1]
        if isinstance(last, str) and isinstance(parent, dict):
            parent.pop(last, None)


def prefix_related(path: Sequence[str | int], prefix: Sequence[str | int]) -> bool:
    """True when one path lies within the other; ``"*"`` in ``prefix`` matches any one step."""
    return all(p == "*" or p == s for s, p in zip(path, prefix))
