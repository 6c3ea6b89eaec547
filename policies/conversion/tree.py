"""Reading and copy-on-write editing of decoded JSON trees, for the converters.

Conversion runs on every write and every cache relist, so converters never deep-copy an
object: the output shares every subtree it does not change with the input, and an edit copies
only the containers on the way down to it (``Tree``). Nothing here mutates its input.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, TypeGuard

Path = tuple[str | int, ...]


class _Absent:
    """A field that is not there, as distinct from one holding ``null``."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


_NOT_MAPPINGS = frozenset({str, int, float, bool, type(None), list})


def is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, without the ABC machinery for the dicts, lists and scalars
    that decoded JSON is made of (the converters ask this for every node they look at)."""
    return isinstance(value, dict) or (type(value) not in _NOT_MAPPINGS and isinstance(value, Mapping))


def get(root: Any, path: Path) -> Any:
    """The value at ``path``, or ABSENT when any step is missing or of the wrong kind."""
    node = root
    for step in path:
        if isinstance(step, str):
            if not is_mapping(node):
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
    return value if is_mapping(value) else {}


def integer(value: Any) -> int | None:
    """``value`` when it is a JSON integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def json_writer(*, sort_keys: bool) -> Callable[[Any], str]:
    """``json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)``, the
    same text, with the C encoder built once instead of on every call, and no cycle check
    (decoded JSON has no cycles)."""
    fallback = json.JSONEncoder(sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False,
                                check_circular=False).encode
    if c_make_encoder is None:  # a Python without the json accelerator
        return fallback

    def write(value: Any) -> str:
        return "".join(encode(value, 0))

    # The accelerator's interface is the json module's own business: use it only while it
    # takes these arguments and writes what json.dumps writes.
    try:
        encode = c_make_encoder(None, json.JSONEncoder().default, encode_basestring, None, ":", ",", sort_keys,
                                False, True)
        if write(_SAMPLE) == fallback(_SAMPLE):
            return write
    except (TypeError, ValueError):
        pass
    return fallback


_SAMPLE = {"b": [1, 2.5, -0.0, True, None, "é\"\n"], "a": {}}


_canonical_json = json_writer(sort_keys=True)


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
    kind = type(value)
    if kind not in _REMEMBERED or (kind is str and len(value) > _LONGEST_REMEMBERED):
        return _fingerprint(value)
    key = (kind, value)  # the type too: True, 1 and 1.0 are equal keys, not equal JSON
    known = _scalar_digests.get(key)
    if known is None:
        known = _fingerprint(value)
        if len(_scalar_digests) < _MOST_REMEMBERED:
            _scalar_digests[key] = known
    return known


def _fingerprint(value: Any) -> str:
    return hashlib.blake2b(canonical(value).encode(), digest_size=8).hexdigest()


# Most fingerprinted values are short scalars the converters write themselves ("OnFailure",
# 6, true): their digests are remembered, a bounded number of them. Not floats: 0.0 and -0.0
# are one key but two JSON texts.
_REMEMBERED = frozenset({str, int, bool, type(None)})
_LONGEST_REMEMBERED = 64
_MOST_REMEMBERED = 4096
_scalar_digests: dict[tuple[type, Any], str] = {}


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
        # The containers this tree copied or made, by id (holding them keeps the ids unique).
        self._owned: dict[int, Any] = {id(self.root): self.root}
        # The parent container the last edit found, for the next edit beside it (an edit only
        # replaces a child of the parent it found, so that parent stays in the tree).
        self._last: tuple[Path, Any] = ((), self.root)

    def _parent(self, path: Path, *, create: bool) -> Any:
        """The owned container holding ``path``'s last step, copying the containers on the way
        that are not owned yet; ABSENT when the way is blocked."""
        end = len(path) - 1
        last_path, node = self._last
        if path[:end] == last_path:
            return node
        owned = self._owned
        node = self.root
        for index in range(end):
            step = path[index]
            if isinstance(step, int):
                if not isinstance(node, list) or not 0 <= step < len(node):
                    return ABSENT  # never invent list elements
                child = node[step]
            elif not isinstance(node, dict):
                return ABSENT
            else:
                child = node.get(step, ABSENT)
            if id(child) not in owned:
                if child is ABSENT:
                    # Only maps are created, and only where a key (not a list index) comes next.
                    if not (create and isinstance(path[index + 1], str)):
                        return ABSENT
                    child = {}
                elif isinstance(child, list):
                    child = list(child)
                elif is_mapping(child):
                    child = dict(child)
                else:
                    return ABSENT  # a scalar (or null) in the way is data, never overwritten
                node[step] = child
                owned[id(child)] = child
            node = child
        self._last = (path[:end], node)
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


def put(owned: dict[str, Any], keys: tuple[str, ...], value: Any) -> bool:
    """``Tree.set`` for a path of keys below a dict the caller owns (a fresh copy): each map on
    the way is copied into its place, a missing one created; False (nothing set) when something
    other than a map is in the way. For converters that know the shape they edit."""
    node = owned
    for key in keys[:-1]:
        child = node.get(key, ABSENT)
        if child is ABSENT:
            child = {}
        elif is_mapping(child):
            child = dict(child)
        else:
            return False
        node[key] = child
        node = child
    node[keys[-1]] = value
    return True


def prefix_related(path: Sequence[str | int], prefix: Sequence[str | int]) -> bool:
    """True when one path lies within the other; ``"*"`` in ``prefix`` matches any one step."""
    return all(p == "*" or p == s for s, p in zip(path, prefix))
