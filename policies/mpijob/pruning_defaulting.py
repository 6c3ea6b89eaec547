"""What the API server does to a v2beta1 MPIJob before any webhook sees it: fields the CRD
schema does not declare are pruned (silently, with ``kubectl apply --validate=false``; with
kubectl's default strict validation the apply is refused), nulls of non-nullable fields are
dropped and schema defaults are filled in.

The webhook never sees a pruned field; the offline checker reads raw manifests, so it uses this
to evaluate exactly the object the webhook would get, and to tell the author which fields would
vanish (a top-level ``spec.cleanPodPolicy`` from the v1 API → ``spec.runPolicy.cleanPodPolicy``).
The same walk serves any other custom resource whose CRD schema the webhook carries
(``as_stored``: the Kubeflow Trainer runtimes ``check`` reads).
"""
from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from policies.messages import closest
from policies.mpijob.crd_type_check import mpijob_schema

_HINT_DEPTH = 3  # how deep below the parent to look for a field of the same name
MPIJOB = "a kubeflow.org/v2beta1 MPIJob"


@dataclass(frozen=True)
class PrunedField:
    path: str  # spec.cleanPodPolicy
    suggestion: str | None = None  # spec.runPolicy.cleanPodPolicy
    dropped_from: str = MPIJOB  # what the API server drops it from, for the message

    @property
    def message(self) -> str:
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        return f"unknown field: the API server drops it from {self.dropped_from}{hint}"


def as_admitted(job: Mapping[str, Any]) -> tuple[dict[str, Any], list[PrunedField]]:
    """``job`` as the API server would store it (pruned, defaulted), and what was pruned."""
    return as_stored(job, mpijob_schema(), MPIJOB)


def as_stored(obj: Mapping[str, Any], schema: Mapping[str, Any], described: str
              ) -> tuple[dict[str, Any], list[PrunedField]]:
    """``obj`` as the API server would store it under the CRD ``schema`` (pruned, defaulted),
    and what was pruned; ``described`` names the object in the messages ("a kubeflow.org/v2beta1
    MPIJob")."""
    result = copy.deepcopy(dict(obj))
    pruned: list[PrunedField] = []
    _walk(result, schema, "", _Pruned(pruned, described))
    return result, pruned


@dataclass(frozen=True)
class _Pruned:
    """Where the walk records what it pruned, and how the messages name the object."""

    found: list[PrunedField]
    described: str

    def add(self, path: str, suggestion: str | None) -> None:
        self.found.append(PrunedField(path, suggestion, self.described))


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(value: Any, schema: Mapping[str, Any], path: str, pruned: _Pruned) -> None:
    if isinstance(value, dict):
        _walk_object(value, schema, path, pruned)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            _walk(item, schema["items"], f"{path}[{index}]", pruned)


def _walk_object(value: dict[str, Any], schema: Mapping[str, Any], path: str, pruned: _Pruned) -> None:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    keeps_unknown = schema.get("x-kubernetes-preserve-unknown-fields") or additional is True
    if not properties and not isinstance(additional, Mapping):
        return  # no structure declared (e.g. the object's own metadata): nothing to prune
    for key in list(value):
        item = value[key]
        if not path and key == "metadata":
            continue  # ObjectMeta is the API server's own, not the CRD schema's, to prune
        sub = properties.get(key)
        if sub is None and isinstance(additional, Mapping):
            sub, item_path = additional, f"{path}[{key}]"
        else:
            item_path = _child(path, key)
        if sub is None:
            if not keeps_unknown:
                del value[key]
                pruned.add(item_path, _suggest(key, schema, path))
            continue
        if item is None and not sub.get("nullable"):
            del value[key]
            continue
        _walk(item, sub, item_path, pruned)
    for key, sub in properties.items():
        if key not in value and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])


def _suggest(key: str, parent: Mapping[str, Any], path: str) -> str | None:
    """Where ``key`` most likely belongs: the same name deeper under the parent (the v1
    ``spec.cleanPodPolicy`` now lives in ``spec.runPolicy``), else a close sibling name."""
    for found in _descendants(parent, path):
        if found[1] == key:
            return found[0]
    sibling = closest(key, (parent.get("properties") or {}).keys())
    return _child(path, sibling) if sibling else None


def _descendants(schema: Mapping[str, Any], path: str) -> Iterator[tuple[str, str]]:
    """(path, name) of declared fields below ``schema``, shallowest first (skipping the
    parent's own properties, which are the siblings)."""
    queue: deque[tuple[Mapping[str, Any], str, int]] = deque([(schema, path, 0)])
    while queue:
        node, node_path, depth = queue.popleft()
        for name, sub in (node.get("properties") or {}).items():
            sub_path = _child(node_path, name)
            if depth > 0:
                yield sub_path, name
            if depth + 1 < _HINT_DEPTH and isinstance(sub, Mapping):
                queue.append((sub, sub_path, depth + 1))
