"""Kubernetes strategic merge patch, for the part of the API the Trainer controller patches:
a JobSet spec and the pod templates inside it.

The Trainer controller applies ``runtimePatches`` (and v2.1's ``podTemplateOverrides``) to the
runtime's template with ``strategicpatch.StrategicMergePatch`` and the Go types' patch tags:
maps merge key by key (a ``null`` removes the key), lists of objects that carry a merge key
merge element by element (``containers`` by ``name``, ``volumeMounts`` by ``mountPath``), every
other list is replaced whole (``tolerations``, ``nodeSelectorTerms``, ``command``). Directives
(``$patch``, ``$retainKeys``) cannot occur: the TrainJob's CRD schema prunes them.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Field name → merge key, from the patchMergeKey tags of the types under a JobSet spec
# (jobset v1alpha2 JobSetSpec, batch/v1 JobSpec, core/v1 PodTemplateSpec). A field name means
# the same thing wherever it occurs in that tree.
MERGE_KEYS: Mapping[str, str] = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "claims": "name",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}


def merge(original: Any, patch: Any) -> Any:
    """``original`` with ``patch`` applied; neither is changed (the result shares subtrees of
    both, so treat it as read-only too)."""
    if not isinstance(patch, Mapping) or not isinstance(original, Mapping):
        return patch
    merged = dict(original)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping):
            merged[key] = merge(original.get(key), value) if isinstance(original.get(key), Mapping) else \
                merge({}, value)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(original.get(key), list):
            merged[key] = _merge_list(original[key], value, MERGE_KEYS[key])
        else:
            merged[key] = _without_nulls(value)
    return merged


def _merge_list(original: list[Any], patch: list[Any], key: str) -> list[Any]:
    """Elements matched by ``key``: patched in place, the others appended in patch order."""
    merged = list(original)
    position = {item.get(key): i for i, item in enumerate(merged) if isinstance(item, Mapping)}
    for item in patch:
        if not isinstance(item, Mapping) or item.get(key) is None:
            merged.append(_without_nulls(item))
            continue
        at = position.get(item[key])
        if at is None:
            position[item[key]] = len(merged)
            merged.append(_without_nulls(item))
        else:
            merged[at] = merge(merged[at], item)
    return merged


def _without_nulls(value: Any) -> Any:
    """A patch value added where nothing was: its nulls delete nothing and are dropped."""
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
