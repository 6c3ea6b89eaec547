"""The structural check every other rule stands on: types of the fields the v2beta1 CRD declares.

The API server validates against the CRD schema too, but not always before us: an object
converted from an older version (``matchPolicy: Equivalent``) arrives neither pruned nor
defaulted, and a mis-registered or hand-crafted request can carry anything. Rules may trust
field types only after this check passed, so the engine runs it first and alone decides when
it fails. Unknown fields are left to the API server's pruning.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

from policies.interface import Finding, Problem

RULE_ID = "object-shape"

_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
}


# The CRD leaves metadata to the API server (``type: object``); these are the ObjectMeta fields
# rules and mutations read, so they get the same type check as the spec.
_STRING = {"type": "string"}
_STRING_MAP = {"type": "object", "additionalProperties": _STRING}
OBJECT_META = {
    "type": "object",
    "properties": {
        "name": _STRING, "generateName": _STRING, "namespace": _STRING, "uid": _STRING,
        "resourceVersion": _STRING, "creationTimestamp": _STRING, "deletionTimestamp": _STRING,
        "generation": {"type": "integer"},
        "labels": _STRING_MAP, "annotations": _STRING_MAP,
        "finalizers": {"type": "array", "items": _STRING},
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
        "managedFields": {"type": "array", "items": {"type": "object"}},
    },
}


@cache
def mpijob_schema() -> Mapping[str, Any]:
    text = resources.files("policies.mpijob").joinpath("schema/mpijob-v2beta1.json").read_text()
    return json.loads(text)


@cache
def _checked_schema() -> Mapping[str, Any]:
    """The CRD schema with the ObjectMeta fields filled in (for the type check only: the API
    server, not the CRD, prunes and defaults metadata)."""
    schema = mpijob_schema()
    return {**schema, "properties": {**schema["properties"], "metadata": OBJECT_META}}


def check_shape(job: Any) -> list[Finding]:
    findings = _check_types(job, _checked_schema(), _well_typed())
    if not findings and not _is_mapping(job.get("spec")):
        findings.append(
            Finding(RULE_ID, "spec", "an MPIJob needs a spec with mpiReplicaSpecs",
                    Problem.REQUIRED)
        )
    return findings


def _check_types(job: Any, schema: Mapping[str, Any], well_typed: Check) -> list[Finding]:
    """The type problems of ``job`` against ``schema`` (``well_typed``: its compiled checker)."""
    if not _is_mapping(job):
        return [_finding("", "the object must be a mapping (a JSON object)", job)]
    return [] if well_typed(job) else list(_walk(job, schema, ""))


# --- part of the schema --------------------------------------------------------------------
# A check of some fields only (those the mutations touch) is the same check against the part of
# the schema that covers them: derived from the schema, never written out a second time.

FieldPath = tuple[str, ...]
# A narrowed map of ``additionalProperties`` (labels, replica specs) checks only some of its
# entries, each against its own narrowed schema, and names them as map entries: ``path[key]``.
MAP_ENTRIES = "x-narrowed-map-entries"


def narrowed(schema: Mapping[str, Any], fields: Iterable[FieldPath]) -> dict[str, Any]:
    """The part of ``schema`` that checks the types of the value at each of ``fields`` (all of
    it) and of every map on the way there, and nothing else: no other field, no required key
    (what is missing is created by whoever writes it, or left to the API server).

    A field names map keys from the object's root, a property or a key of an
    ``additionalProperties`` map alike. A step the schema has no field for is refused
    (``ValueError``): a misspelt field would otherwise check nothing, silently."""
    tree: dict[str, Any] = {}
    for field in fields:
        if not field:
            return dict(schema)  # the whole object
        node = tree
        for key in field[:-1]:
            node = node.setdefault(key, {})
            if node is _WHOLE:
                break  # a shorter field covers this one
        else:
            node[field[-1]] = _WHOLE
    return _narrowed_node(schema, tree, ())


def fields_check(fields: Iterable[FieldPath]) -> Callable[[Any], list[Finding]]:
    """The type check of ``fields`` alone (see ``narrowed``), compiled once: the same findings as
    ``check_shape`` for those fields, none for the rest of the object."""
    schema = narrowed(_checked_schema(), fields)
    well_typed = _compile(schema).check
    return lambda job: _check_types(job, schema, well_typed)


def schema_check(schema: Mapping[str, Any]) -> Callable[[Any], list[Finding]]:
    """The same type check against another object's schema (one built from parts of this one,
    such as a TrainJob's, whose patches hold pod templates), compiled once."""
    well_typed = _compile(schema).check
    return lambda obj: _check_types(obj, schema, well_typed)


_WHOLE: Any = object()  # in the tree of fields: this value is checked, all of it


def _narrowed_node(schema: Mapping[str, Any], tree: dict[str, Any], path: FieldPath) -> dict[str, Any]:
    if tree is _WHOLE:
        return dict(schema)
    if schema.get("type") != "object":
        raise ValueError(f"no map at {'.'.join(path) or 'the root'} in the schema to narrow")
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    node: dict[str, Any] = {"type": "object"}
    for key, below in tree.items():
        if key in properties:
            node.setdefault("properties", {})[key] = _narrowed_node(properties[key], below, (*path, key))
        elif isinstance(additional, Mapping):
            node.setdefault(MAP_ENTRIES, {})[key] = _narrowed_node(additional, below, (*path, key))
        else:
            raise ValueError(f"the schema has no field {'.'.join((*path, key))}")
    return node


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)  # decoded JSON: the exact type, fast


def _matches(value: Any, type_name: str) -> bool:
    match type_name:
        case "object":
            return isinstance(value, Mapping)
        case "array":
            return isinstance(value, list)
        case "string":
            return isinstance(value, str)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
    return True


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(value: Any, schema: Mapping[str, Any], path: str) -> Iterator[Finding]:
    if value is None:
        return  # the API server drops nulls of non-nullable fields; nothing to check
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _matches(value, "integer")):
            yield _finding(path, "must be an integer or a string (a quantity such as 2, \"500m\" or \"4Gi\")", value)
        return
    expected = schema.get("type")
    if expected and not _matches(value, expected):
        yield _finding(path, f"must be {_TYPE_WORDS.get(expected, expected)}, not {_describe(value)}", value)
        return
    if "enum" in schema and value not in schema["enum"]:
        return  # enums are the rules' business: they explain the choice better than a schema
    if isinstance(value, Mapping):
        yield from _walk_mapping(value, schema, path)
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            yield from _walk(item, schema["items"], f"{path}[{index}]")


def _walk_mapping(value: Mapping[str, Any], schema: Mapping[str, Any], path: str) -> Iterator[Finding]:
    properties = schema.get("properties") or {}
    for required in schema.get("required") or ():
        if value.get(required) is None:
            yield Finding(RULE_ID, _child(path, required), "is required", Problem.REQUIRED)
    entries = schema.get(MAP_ENTRIES) or {}
    for key, item in value.items():
        if key in properties:
            yield from _walk(item, properties[key], _child(path, key))
        elif key in entries:
            yield from _walk(item, entries[key], f"{path}[{key}]")
        elif isinstance(schema.get("additionalProperties"), Mapping):
            yield from _walk(item, schema["additionalProperties"], f"{path}[{key}]")


# --- the fast path -------------------------------------------------------------------------
# Nearly every object is well typed. The walk above builds a path string and a generator for
# every value it visits, to say where a problem is; the checker below answers only "no problem
# at all?", compiled once from the schema. It accepts exactly what the walk finds nothing in, so
# the walk runs only for objects that have a problem to report.
#
# Most values are scalars, and decoded JSON has exact types: a value is checked by looking its
# type up in the set of types its schema node accepts outright (``_Node.exact``), without a
# call. Only values of other types (subclasses, a Mapping that is not a dict) and nested objects
# and lists take a call (``_Node.check``). Every decision about a schema node (its type, its
# children, whether it is a map of one kind of value) is taken here once, not again per value.

Check = Callable[[Any], bool]
_NONE = type(None)
_NOTHING: frozenset[type] = frozenset()
_ONLY_NULL: frozenset[type] = frozenset({_NONE})

# The types of decoded JSON that pass a node of each schema type without a further look; null
# passes every node (the API server drops nulls of non-nullable fields).
_EXACT: dict[str, frozenset[type]] = {
    "object": frozenset({dict, _NONE}),
    "array": frozenset({list, _NONE}),
    "string": frozenset({str, _NONE}),
    "integer": frozenset({int, _NONE}),
    "number": frozenset({int, float, _NONE}),
    "boolean": frozenset({bool, _NONE}),
}
_INT_OR_STRING: frozenset[type] = frozenset({str, int, _NONE})


class _Node(NamedTuple):
    exact: frozenset[type]  # types accepted without a call; only null for a node with children
    check: Check  # the whole answer, for a value of any type


@cache
def _well_typed() -> Check:
    return _compile(_checked_schema()).check


def _anything(value: Any) -> bool:
    return True


def _compile(schema: Mapping[str, Any]) -> _Node:
    if schema.get("x-kubernetes-int-or-string"):
        return _Node(_INT_OR_STRING, _is_int_or_string)
    type_name = schema.get("type")
    additional = schema.get("additionalProperties")
    other = _compile(additional) if isinstance(additional, Mapping) else None
    entries = schema.get(MAP_ENTRIES) or {}
    if type_name == "object" and (schema.get("properties") or schema.get("required") or entries):
        # A narrowed map's entries are checked like properties: by key, one node each.
        declared = {**(schema.get("properties") or {}), **entries}
        properties = {key: _compile(item) for key, item in declared.items()}
        required = tuple(schema.get("required") or ())
        if other is None and not required and len(properties) <= _FEW_KEYS:
            check = _few_keys_check(properties)
        else:
            check = _object_check(properties, other, required)
    elif type_name == "object" and other is not None:
        check = _map_check(other)
    elif type_name == "array" and "items" in schema:
        check = _list_check(_compile(schema["items"]))
    elif type_name in _EXACT:
        # Nothing below this node is checked (and an enum only ends the walk): its type is all.
        return _Node(_EXACT[type_name], _type_check(type_name))
    elif schema.get("properties") or schema.get("required") or other or "items" in schema:
        raise ValueError(f"unsupported schema node: children under type {type_name!r}")
    else:
        return _Node(_NOTHING, _anything)  # no type the walk knows: it checks nothing here either
    if "enum" in schema:
        # The walk ends at a value that is none of the choices, children unchecked; this
        # embedded CRD has enums only on scalars, so that case is refused, not compiled.
        raise ValueError(f"unsupported schema node: an enum on a {type_name} with children")
    return _Node(_ONLY_NULL, check)


def _type_check(type_name: str) -> Check:
    return lambda value: value is None or _matches(value, type_name)


def _is_int_or_string(value: Any) -> bool:
    return value is None or isinstance(value, str) or _matches(value, "integer")


def _object_check(properties: dict[str, _Node], other: _Node | None, required: tuple[str, ...]) -> Check:
    # Two lookups by key, not one of a pair to unpack: most values pass on their exact type.
    exact_of = {key: node.exact for key, node in properties.items()}
    check_of = {key: node.check for key, node in properties.items()}
    # Without a schema for other keys, other_exact is None and other_check is never called.
    other_exact, other_check = other if other is not None else (None, _anything)

    def check(value: Any) -> bool:
        if type(value) is not dict:
            if value is None:
                return True
            if not isinstance(value, Mapping):
                return False
        for key in required:
            if value.get(key) is None:
                return False
        for key, item in value.items():
            exact = exact_of.get(key, other_exact)
            if exact is None or type(item) in exact:
                continue  # undeclared (the API server prunes it), or of an exact type it accepts
            if not check_of.get(key, other_check)(item):
                return False
        return True

    return check


# An object with this many declared keys or fewer (a narrowed schema's, mostly) is checked by
# looking each of them up, not by going through all of its entries.
_FEW_KEYS = 4


def _few_keys_check(properties: dict[str, _Node]) -> Check:
    declared = tuple((key, node.exact, node.check) for key, node in properties.items())

    def check(value: Any) -> bool:
        if type(value) is not dict:
            if value is None:
                return True
            if not isinstance(value, Mapping):
                return False
        for key, exact, accepts in declared:
            item = value.get(key)  # a missing key is null, and null passes
            if type(item) not in exact and not accepts(item):
                return False
        return True

    return check


def _map_check(values: _Node) -> Check:
    """Only ``additionalProperties`` (labels, resource quantities, replica specs): no lookup per key."""
    return _each_check(values, dict, Mapping, lambda value: value.values())


def _list_check(items: _Node) -> Check:
    return _each_check(items, list, list, iter)


def _each_check(node: _Node, exact_container: type, container: type,
                members: Callable[[Any], Iterable[Any]]) -> Check:
    """Every member of a map's values or a list's items against one schema node."""
    exact, accepts = node

    def check(value: Any) -> bool:
        if type(value) is not exact_container:
            if value is None:
                return True
            if not isinstance(value, container):
                return False
        for item in members(value):
            if type(item) not in exact and not accepts(item):
                return False
        return True

    return check


def _describe(value: Any) -> str:
    for type_name in ("boolean", "integer", "number", "string", "array", "object"):
        if _matches(value, type_name):
            return _TYPE_WORDS[type_name]
    return "null"


def _finding(path: str, message: str, value: Any) -> Finding:
    return Finding(RULE_ID, path, message, Problem.INVALID, _preview(value))


def _preview(value: Any) -> Any:
    """Show scalars as they are; never echo a whole nested object back into a message."""
    if isinstance(value, Mapping):
        return "{…}"
    if isinstance(value, list):
        return "[…]"
    if isinstance(value, str) and len(value) > 64:
        return value[:61] + "…"
    return value
