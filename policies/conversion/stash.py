"""Lossless conversion on top of lossy derivations: what the target version cannot hold is
stashed as JSON in one annotation and restored on the way back.

Each version module only knows how to *derive* one form from the other (``up``: spoke → hub,
``down``: hub → spoke), losing what the other form cannot express. ``convert`` makes that
lossless, the way Cluster API's ``conversion-data`` annotation does, but without a per-field
list to maintain: after deriving the target object it derives the source back from it, and
records the difference from the real source as a list of edits. Converting back replays them.

An edit is replayed only if the field it applies to still holds what the derivation produced
when the edit was recorded (a fingerprint is kept): a field someone changed in the other
version since then is not overwritten with old data. Fields that only make sense together
(v1alpha1's ``gpus`` / ``replicas`` / per-worker resources) form a *coupled group* of their
version: its edits are replayed all together or not at all, so a view never mixes the old
size with the new one.

The annotation maps an apiVersion to the edits that restore the object as it was in that
version, so a chain v1alpha1 → v2beta1 → v1 → v2beta1 → v1alpha1 gives back the original.
"""
from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.conversion.tree import ABSENT, Path, Tree, digest, get, is_mapping, json_writer, prefix_related

log = logging.getLogger(__name__)

STASH_ANNOTATION = "mpijob-webhook.kubeflow.org/conversion-data"
_FORMAT = 1

# One recorded edit: (path, fingerprint of the derived value it replaces, value or ABSENT).
Edit = tuple[Path, str, Any]
Derivation = Callable[[Mapping[str, Any]], "Derived"]


@dataclass(frozen=True)
class Derived:
    """A lossy derivation's result: the object, and what the user should know about it."""

    obj: dict[str, Any]
    notes: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Converted:
    obj: dict[str, Any]
    notes: tuple[Any, ...] = ()
    restored: bool = False  # stashed data of the target version was replayed
    dropped: tuple[Path, ...] = ()  # fields of the source that only the stash now holds


# --- the difference between two JSON trees -------------------------------------------------
def diff(derived: Any, original: Any, path: Path = ()) -> list[Edit]:
    """Edits that turn ``derived`` into ``original``; maps key by key, equal-length lists element
    by element unless their named elements were reordered, anything else replaced whole: an
    element moved to another place is never patched field by field into the one now there."""
    edits: list[Edit] = []
    _diff(derived, original, path, edits)
    return edits


def _diff(derived: Any, original: Any, path: Path, edits: list[Edit]) -> None:
    # One walk, no separate "equal?" pass first: maps that turn out equal add no edit on the
    # way, and subtrees the derivations passed through are the same object, skipped at once.
    if derived is original:
        return
    if _is_map(derived) and _is_map(original):
        _diff_maps(derived, original, path, edits)
    elif isinstance(derived, list) and isinstance(original, list) and _aligned(derived, original):
        for index, (left, right) in enumerate(zip(derived, original)):
            if left is not right:
                _diff_child(left, right, path + (index,), edits)
    elif not same(derived, original):
        edits.append((path, digest(derived), original))


def _diff_maps(derived: Mapping[str, Any], original: Mapping[str, Any], path: Path, edits: list[Edit],
               ignored: str | None = None) -> None:
    """``_diff`` of two maps, leaving out the key ``ignored`` on both sides."""
    found = 0
    for key, value in original.items():
        child = derived.get(key, ABSENT)
        if child is value:
            found += 1
        elif child is ABSENT:
            if key != ignored:
                edits.append((path + (key,), "-", value))
        else:
            found += 1
            if key != ignored:
                _diff_child(child, value, path + (key,), edits)
    if found < len(derived):
        for key, value in derived.items():
            if key not in original and key != ignored:
                edits.append((path + (key,), digest(value), ABSENT))


def _diff_child(derived: Any, original: Any, path: Path, edits: list[Edit]) -> None:
    """``_diff`` for two values known not to be the same object, the usual cases first: two
    scalars of one type (most fields) settled here, two dicts walked without another call."""
    kind = type(original)
    if type(derived) is kind:
        if kind is dict:
            _diff_maps(derived, original, path, edits)
            return
        if kind in _SCALARS:
            if derived != original:
                edits.append((path, digest(derived), original))
            return
    _diff(derived, original, path, edits)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def same(left: Any, right: Any) -> bool:
    """Equal as JSON: unlike ``==``, ``true`` is not ``1`` and ``1.0`` is not ``1``. Shared
    subtrees (the converters copy only what they change) compare by identity, at no cost."""
    if left is right:
        return True
    if _is_map(left):
        return _is_map(right) and left.keys() == right.keys() and all(
            same(value, right[key]) for key, value in left.items())
    if isinstance(left, list):
        return isinstance(right, list) and len(left) == len(right) and all(map(same, left, right))
    return type(left) is type(right) and left == right


_is_map = is_mapping


def _aligned(left: list[Any], right: list[Any]) -> bool:
    """Same length, and not the same named elements (containers, volumes, env) reordered. A
    renamed element still aligns: v1alpha1's one container is the launcher's and the workers'."""
    if len(left) != len(right):
        return False
    if len(left) < 2:
        return True  # nothing to reorder
    left_names, right_names = _names(left), _names(right)
    return left_names == right_names or sorted(left_names) != sorted(right_names)


def _names(items: list[Any]) -> list[str]:
    return [repr(item.get("name")) if _is_map(item) else "" for item in items]


def replay(obj: Mapping[str, Any], edits: Sequence[Edit], coupled: Sequence[Sequence[Path]] = ()) -> tuple[dict[str, Any], bool]:
    """``obj`` with every still-applicable edit replayed (copy-on-write); True if all were."""
    current = [get(obj, path) for path, _, _ in edits]
    fresh = [digest(value) == expected for value, (_, expected, _) in zip(current, edits)]
    for members in _coupled_members(edits, coupled):
        if not all(fresh[i] for i in members):
            for i in members:
                fresh[i] = False
    tree = Tree(obj)
    for index, (path, _, value) in enumerate(edits):
        if not fresh[index]:
            continue
        if value is ABSENT:
            tree.remove(path)
        elif not tree.set(path, value):
            fresh[index] = False
    return tree.root, all(fresh)


def _guards(derived: Mapping[str, Any], edits: Sequence[Edit], coupled: Sequence[Sequence[Path]]) -> list[Edit]:
    """For each coupled group that ``edits`` touch, its other fields as ``derived`` holds them,
    as edits that change nothing when replayed. They make the group stale once any of its fields
    changed in the other version, also one no edit was recorded for: v1alpha1's ``replicas``
    equal to the derived worker count beside a stashed ``gpus``, then the workers edited in
    v2beta1, must not bring ``gpus`` back over the new count."""
    guards: list[Edit] = []
    for field in _guarded_fields(tuple(coupled), tuple(path for path, _, _ in edits)):
        value = get(derived, field)
        guards.append((field, digest(value), value))
    return guards


# Which fields to guard depends only on the coupled groups and the paths edited, and the same
# few combinations come back conversion after conversion: worked out once for each.
@functools.lru_cache(maxsize=256)
def _guarded_fields(coupled: tuple[tuple[Path, ...], ...], paths: tuple[Path, ...]) -> tuple[Path, ...]:
    fields: list[Path] = []
    for prefixes in coupled:
        if not any(prefix_related(path, prefix) for path in paths for prefix in prefixes):
            continue
        for prefix in prefixes:
            if "*" in prefix or any(prefix_related(path, prefix) for path in (*paths, *fields)):
                continue  # a field an edit covers already, or a pattern naming no one field
            fields.append(tuple(prefix))
    return tuple(fields)


def _coupled_members(edits: Sequence[Edit], coupled: Sequence[Sequence[Path]]) -> list[list[int]]:
    """Indices of the edits in each coupled group; groups sharing an edit are merged."""
    groups: list[set[int]] = []
    for prefixes in coupled:
        members = {i for i, (path, _, _) in enumerate(edits)
                   if any(prefix_related(path, prefix) for prefix in prefixes)}
        if not members:
            continue
        for group in [g for g in groups if g & members]:
            members |= group
            groups.remove(group)
        groups.append(members)
    return [sorted(g) for g in groups]


# --- the annotation --------------------------------------------------------------------------
def read(annotations: Mapping[str, Any]) -> dict[str, list[Edit]]:
    """The stash as {apiVersion: edits}; a damaged or foreign value counts as no stash."""
    raw = annotations.get(STASH_ANNOTATION)
    if not isinstance(raw, str):
        return {}
    try:
        doc = json.loads(raw)
        if doc.get("format") != _FORMAT:
            return {}
        return {version: [_decode(edit) for edit in edits] for version, edits in doc["versions"].items()}
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
        log.warning("ignoring an unreadable %s annotation", STASH_ANNOTATION)
        return {}


_compact_json = json_writer(sort_keys=False)


def write(stash: Mapping[str, Sequence[Edit]]) -> str:
    # An edit is written as the array [path, fingerprint, value] (tuples are JSON arrays too),
    # without the value when the edit removes the field.
    versions = {version: [edit if edit[2] is not ABSENT else edit[:2] for edit in edits]
                for version, edits in sorted(stash.items())}
    return _compact_json({"format": _FORMAT, "versions": versions})


def _decode(raw: Any) -> Edit:
    path = tuple(raw[0])
    if not path or not all(isinstance(step, (str, int)) and not isinstance(step, bool) for step in path):
        raise ValueError("bad path")
    if not isinstance(raw[1], str):
        raise ValueError("bad fingerprint")
    return path, raw[1], raw[2] if len(raw) > 2 else ABSENT


# --- lossless conversion -------------------------------------------------------------------
def without_stash(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], dict[str, list[Edit]]]:
    """The object with no stash annotation (metadata copied only if it had one), and the stash."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if is_mapping(metadata) else None
    if not is_mapping(metadata) or not is_mapping(annotations) or STASH_ANNOTATION not in annotations:
        return obj, {}
    stash = read(annotations)
    rest = {k: v for k, v in annotations.items() if k != STASH_ANNOTATION}
    new_metadata = {k: v for k, v in metadata.items() if k != "annotations"}
    if rest:
        new_metadata["annotations"] = rest
    return {**obj, "metadata": new_metadata}, stash


def with_stash(obj: dict[str, Any], stash: Mapping[str, Sequence[Edit]]) -> dict[str, Any]:
    """``obj`` (owned by the caller at the top level) carrying ``stash`` when it is not empty."""
    if not stash:
        return obj
    metadata = dict(obj.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), STASH_ANNOTATION: write(stash)}
    obj["metadata"] = metadata
    return obj


def convert(
    obj: Mapping[str, Any],
    *,
    source: str,
    target: str,
    forward: Derivation,
    backward: Derivation,
    coupled: Mapping[str, Sequence[Sequence[Path]]],
) -> Converted:
    """``obj`` (of apiVersion ``source``) as ``target``, losing nothing.

    ``forward`` derives the target form, ``backward`` the source form; ``coupled`` holds each
    version's coupled groups (paths in that version's form)."""
    clean, stash = without_stash(obj)
    derived = forward(clean)
    result, restored = derived.obj, False
    edits = stash.pop(target, None)
    if edits:
        result, restored = replay(result, edits, coupled.get(target, ()))
    lost: list[Edit] = []  # what the source form loses in the target form (its apiVersion aside)
    source_form = backward(result).obj
    _diff_maps(source_form, clean, (), lost, ignored="apiVersion")
    if lost:
        stash[source] = lost + _guards(source_form, lost, coupled.get(source, ()))
    result = with_stash(result, stash)  # both derivations and replay return a fresh top level
    return Converted(result, derived.notes, restored, tuple([path for path, _, value in lost if value is not ABSENT]))
