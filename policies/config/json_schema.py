"""The policy file's JSON Schema and the defaults document, both generated from the registry (each
rule's and mutation's ``Params``), so a new rule is described the moment it is registered."""
from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from collections.abc import Mapping, Sequence
from decimal import Decimal
from enum import Enum
from typing import Any

from policies.config.layered_policy import DEFAULT_KUEUE_USERNAMES
from policies.config.parameters import _MAPPINGS, _SEQUENCES, _is_union, _type_hints, yaml_name
from policies.config.rule_settings import Settings
from policies.config.reader import (API_VERSION, CLUSTER_UNAVAILABLE_ACTIONS, KIND, _NAMESPACE_PATTERN,
                                    _default_exempt, _defaults, _registry)
from policies.interface import Action, Mutation, Rule
from policies.kube.label_selectors import OPERATORS

SCHEMA_ID = "https://github.com/mpijob-webhook/mpijob-webhook/policy.schema.json"


def json_schema(rules: Sequence[Rule] | None = None, mutations: Sequence[Mutation] | None = None) -> dict[str, Any]:
    """The policy file's JSON Schema (draft 2020-12), generated from the registry; for editors
    (yaml-language-server) and CI linters. The loader checks the same and more."""
    registry = _registry(rules, mutations)
    layer = {
        "clusterUnavailable": {"$ref": "#/$defs/clusterUnavailable"},
        "rules": {"$ref": "#/$defs/rules"},
        "mutations": {"$ref": "#/$defs/mutations"},
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "mpijob-webhook policy",
        "description": "Per rule an action and parameters, per mutation on/off and parameters, exempt "
                       "namespaces and per-namespace overrides. Precedence: built-in defaults < this "
                       "file's cluster-wide settings < namespaceSelector overrides (in file order) < "
                       "namespaces overrides (in file order); an exempt namespace is never checked.",
        "type": ["object", "null"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": KIND},
            **layer,
            "exemptNamespaces": {
                "description": "Namespaces never checked (replaces the default: kube-system and the "
                               "webhook's own namespace, which is always exempt).",
                "$ref": "#/$defs/namespaceList",
                "default": sorted(_default_exempt(None)),
            },
            "kueueUsernames": {
                "description": "Who Kueue's controller sends requests as (userInfo.username): only these "
                               "may admit or stop a TrainJob (its own runtimePatches or podTemplateOverrides "
                               "entries and spec.suspend) without the change being checked.",
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "default": sorted(DEFAULT_KUEUE_USERNAMES),
            },
            "overrides": {"type": "array", "items": {"$ref": "#/$defs/override"}},
        },
        "$defs": {
            "clusterUnavailable": {
                "description": "What happens to cluster-aware rules while cluster state is unavailable: "
                               "warn admits with a warning, deny refuses (fail closed).",
                "enum": [a.value for a in CLUSTER_UNAVAILABLE_ACTIONS],
                "default": Settings.cluster_unavailable.value,
            },
            "action": {"enum": [a.value for a in Action]},
            "namespaceList": {
                "type": "array",
                "items": {"type": "string", "maxLength": 63, "pattern": _NAMESPACE_PATTERN.pattern},
            },
            "rules": {
                "type": "object",
                "additionalProperties": False,
                "properties": {r.id: _rule_schema(r) for r in registry.rules.values()},
            },
            "mutations": {
                "type": "object",
                "additionalProperties": False,
                "properties": {m.id: _mutation_schema(m) for m in registry.mutations.values()},
            },
            "override": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string"},
                    "namespaces": {"$ref": "#/$defs/namespaceList", "minItems": 1},
                    "namespaceSelector": {"$ref": "#/$defs/labelSelector"},
                    "exempt": {"type": "boolean", "default": False},
                    **layer,
                },
                "oneOf": [{"required": ["namespaces"]}, {"required": ["namespaceSelector"]}],
            },
            "labelSelector": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "matchExpressions": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["key", "operator"],
                            "properties": {
                                "key": {"type": "string"},
                                "operator": {"enum": list(OPERATORS)},
                                "values": {"type": "array", "items": {"type": "string"}},
                            },
                        },
                    },
                },
            },
        },
    }


def _doc(item: Any) -> str:
    """The first paragraph of the rule's docstring, else of its module's."""
    text = type(item).__doc__ or getattr(sys.modules.get(type(item).__module__), "__doc__", None) or ""
    return " ".join(text.strip().split("\n\n")[0].split())


def _field_comments(params_type: type) -> dict[str, str]:
    """The ``# comments`` written above (or beside) each Params field: its documentation."""
    try:
        source = inspect.getsource(params_type)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in source.splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        declared = re.match(r"(\w+)\s*:[^#]*(#\s*(.*))?$", stripped)
        if declared and not stripped.startswith(("def ", "@", "return")):
            text = " ".join([*pending, declared.group(3) or ""]).strip()
            if text:
                comments[declared.group(1)] = text
        pending = []
    return comments


def _rule_schema(rule: Rule) -> dict[str, Any]:
    full = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "action": {"$ref": "#/$defs/action", "default": rule.default_action.value},
            "params": _params_schema(rule.Params),
        },
    }
    return {"description": _doc(rule), "oneOf": [{"$ref": "#/$defs/action"}, full]}


def _mutation_schema(mutation: Mutation) -> dict[str, Any]:
    full = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "enabled": {"type": "boolean", "default": mutation.enabled_by_default},
            "params": _params_schema(mutation.Params),
        },
    }
    return {"description": _doc(mutation), "oneOf": [{"type": "boolean"}, full]}


def _params_schema(params_type: type) -> dict[str, Any]:
    hints = _type_hints(params_type)
    defaults = params_type()
    comments = _field_comments(params_type)
    properties = {}
    for f in dataclasses.fields(params_type):
        if not f.init:
            continue
        schema = _type_schema(hints[f.name])
        doc = (f.metadata.get("doc") if f.metadata else None) or comments.get(f.name)
        if doc:
            schema = {"description": doc, **schema}
        properties[yaml_name(f.name)] = {**schema, "default": to_plain(getattr(defaults, f.name))}
    return {"type": "object", "additionalProperties": False, "properties": properties}


def _type_schema(tp: Any) -> dict[str, Any]:
    if tp is Any:
        return {}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        options = [_type_schema(a) if a is not type(None) else {"type": "null"} for a in args]
        return {"anyOf": options}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if isinstance(tp, type) and issubclass(tp, Enum):
        return {"enum": [m.value for m in tp]}
    simple = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if tp in simple:
        return {"type": simple[tp]}
    if tp is Decimal:
        return {"type": ["number", "string"]}
    if origin in _SEQUENCES:
        if origin is tuple and args and args[-1] is not Ellipsis:
            return {"type": "array", "prefixItems": [_type_schema(a) for a in args],
                    "minItems": len(args), "maxItems": len(args)}
        schema: dict[str, Any] = {"type": "array", "items": _type_schema(args[0]) if args else {}}
        if origin in (frozenset, set):
            schema["uniqueItems"] = True
        return schema
    if origin in _MAPPINGS:
        return {"type": "object", "additionalProperties": _type_schema(args[1]) if args else {}}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _params_schema(tp)
    raise TypeError(f"parameter type {tp!r} cannot be written in a policy file")


def to_plain(value: Any) -> Any:
    """A parameter value as JSON/YAML writes it (for schema defaults and ``policy defaults``)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else str(value)
    if isinstance(value, (frozenset, set)):
        return sorted(to_plain(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {yaml_name(f.name): to_plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    return value


def defaults_document(own_namespace: str | None = None, *, rules: Sequence[Rule] | None = None,
                      mutations: Sequence[Mutation] | None = None) -> dict[str, Any]:
    """The built-in policy written out in full: a starting point for a policy file."""
    registry = _registry(rules, mutations)
    settings = _defaults(registry)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "clusterUnavailable": settings.cluster_unavailable.value,
        "exemptNamespaces": sorted(_default_exempt(own_namespace)),
        "kueueUsernames": sorted(DEFAULT_KUEUE_USERNAMES),
        "rules": {rule_id: {"action": config.action.value, "params": to_plain(config.params)}
                  for rule_id, config in settings.rules.items()},
        "mutations": {mutation_id: {"enabled": config.enabled, "params": to_plain(config.params)}
                      for mutation_id, config in settings.mutations.items()},
        "overrides": [],
    }
