"""The upstream v2beta1 CRD's structural schema, applied the way the API server applies it.

Read from the reference copy of the upstream CRD (not from our embedded, stripped schema), so a
test that uses it checks our output against upstream and not against ourselves:

- ``as_api_server_sends(obj)``: nulls of non-nullable fields dropped, then schema defaults
  applied (what a webhook receives on CREATE, and what is stored after the webhooks ran);
- ``schema_errors(obj)``: everything the CRD's structural schema refuses, plus every field it
  would prune, as ``path: message`` lines.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from typing import Any

import jsonschema
import yaml

from testing.reference_data import UPSTREAM

CRD_FILE = UPSTREAM / "crd" / "mpijobs-v2beta1.yaml"
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# metadata is only "type: object" in a CRD: the API server checks it as ObjectMeta itself.
OBJECT_META = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
    },
}


@cache
def openapi_schema() -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(CRD_FILE.read_text(), Loader=loader)  # noqa: S506 - a safe loader
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v2beta1")
    return version["schema"]["openAPIV3Schema"]


def as_api_server_sends(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy with nulls dropped and the CRD's defaults applied."""
    obj = _drop_nulls(copy.deepcopy(obj))
    _apply_defaults(obj, openapi_schema())
    return obj


def schema_errors(obj: Any) -> list[str]:
    errors = sorted(_validator().iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_path(e.absolute_path)}: {e.message}" for e in errors]


def _drop_nulls(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_drop_nulls(v) for v in node]
    return node


def _apply_defaults(node: Any, schema: dict[str, Any]) -> None:
    if isinstance(node, dict):
        properties = schema.get("properties") or {}
        for key, sub in properties.items():
            if key not in node and "default" in sub:
                node[key] = copy.deepcopy(sub["default"])
        for key, value in node.items():
            sub = properties.get(key, schema.get("additionalProperties"))
            if isinstance(sub, dict):
                _apply_defaults(value, sub)
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        for item in node:
            _apply_defaults(item, schema["items"])


@cache
def _validator() -> jsonschema.protocols.Validator:
    schema = _to_json_schema(openapi_schema())
    schema["properties"]["metadata"] = OBJECT_META
    cls = jsonschema.validators.extend(
        jsonschema.Draft7Validator, {"x-kubernetes-list-map-keys": _list_map_keys}
    )
    return cls(schema)


def _to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI v3 (Kubernetes structural) → JSON Schema draft 7, with pruning made an error."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "description" or key == "default":
            continue
        if key == "properties":
            out[key] = {name: _to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _to_json_schema(value)
        elif key == "anyOf":
            out[key] = [_to_json_schema(sub) for sub in value]
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in node:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("format") in _INT_RANGES:
        out["minimum"], out["maximum"] = _INT_RANGES[node["format"]]
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    if "properties" in node and "additionalProperties" not in node \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False  # the API server would prune it: a bug to produce
    return out


def _list_map_keys(validator: Any, keys: list[str], instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    if not isinstance(instance, list):
        return
    seen: set[str] = set()
    for item in instance:
        if not isinstance(item, dict):
            continue
        identity = json.dumps([item.get(k) for k in keys])
        if identity in seen:
            yield jsonschema.ValidationError(f"duplicate entry for list-map keys {keys}: {identity}")
        seen.add(identity)


def _path(parts: Any) -> str:
    return "/" + "/".join(str(p) for p in parts)
