"""Our own entry in a TrainJob's patch list, where the mutations write what the pods need.

A TrainJob's pods come from its runtime; a TrainJob changes them only through patches: one
``spec.runtimePatches`` entry per owner (v2.2+, keyed by a domain-prefixed ``manager``), or
``spec.podTemplateOverrides`` entries (v2.1, by ``targetJobs``). The mutations add ONE entry of
their own — never editing the user's or Kueue's — that targets the ``launcher`` and ``node`` pod
templates. It comes last, so on a field both set it wins, as the mutation's own value would on an
MPIJob; the mutations only write what the effective job lacks, so a TrainJob that has it all
gets no patch, and calling them again (reinvocation) changes nothing.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from policies.mutations.edits import WorkingCopy
from policies.trainer.api import ApiShape, is_mapping, sequence

MANAGER = "mpijob-webhook.kubeflow.org/mutations"
RUNTIME_PATCHES = "runtimePatches"
POD_TEMPLATE_OVERRIDES = "podTemplateOverrides"
# A v2.1 entry has no owner field: ours carries this pod annotation (value: MANAGER), which also
# tells whoever reads a pod where its Istio and ServiceAccount settings came from.
V2_1_MARKER = "mpijob-webhook.kubeflow.org/patched-by"
MAX_RUNTIME_PATCHES = 16  # the CRD's maxItems: one more and the API server refuses the TrainJob
FULL = (f"spec.runtimePatches already has {MAX_RUNTIME_PATCHES} entries, the most a TrainJob may have, "
        "so the webhook's own entry was not added")


def set_on_pods(job: WorkingCopy, shape: ApiShape, targets: Sequence[str], section: str, key: str,
                value: Any, subkey: str | None = None) -> bool:
    """In our entry, on the pod templates of ``targets``: ``metadata.<key>.<subkey> = value``
    (``section`` "metadata") or ``spec.<key> = value`` (``section`` "spec"). True when it changed
    the job (call it only for what is missing); False when there is no room for our entry (say
    ``FULL`` to the user)."""
    pods = _own_pod_templates(job, shape, targets)
    if pods is None:
        return False
    for pod in pods:
        part = pod.setdefault(section, {})
        if subkey is None:
            part[key] = value
        else:
            part.setdefault(key, {})[subkey] = value
    return True


def _own_pod_templates(job: WorkingCopy, shape: ApiShape, targets: Sequence[str]) -> list[dict[str, Any]] | None:
    """The pod templates of ``targets`` in our entry (None: no room for it). Looked up once per
    request and target set: the mutations of one request write into the same entry one after the
    other, and while the spec still holds the list that entry is in, the next one finds them
    where the first left them."""
    field = RUNTIME_PATCHES if shape.has_runtime_patches else POD_TEMPLATE_OVERRIDES
    key = (_FOUND, field, tuple(targets))
    found = job.found.get(key)
    if found is not None:
        entries, pods = found
        spec = job.get("spec")
        if isinstance(spec, dict) and spec.get(field) is entries:
            return pods  # type: ignore[no-any-return]
    entry = _own_entry(job, shape, targets)
    if entry is None:
        return None
    pods = _pod_templates(entry, shape, targets)
    job.found[key] = (job["spec"][field], pods)
    return pods


_FOUND = "own_patch.pod_templates"  # our key prefix in ``WorkingCopy.found``


def _own_entry(job: WorkingCopy, shape: ApiShape, targets: Sequence[str]) -> dict[str, Any] | None:
    """Our entry in the working copy, found or appended; a copy the caller may edit in place (the
    list and the entry are new objects, the user's entries are shared and left alone). The list
    and entry an earlier mutation of this request made are the working copy's own: edited in place."""
    spec = job.writable(("spec",))
    if spec is None:
        raise ValueError("spec is not an object")
    field = RUNTIME_PATCHES if shape.has_runtime_patches else POD_TEMPLATE_OVERRIDES
    current = sequence(spec, field)
    entries: list[Any] = current if isinstance(current, list) and job.made(current) else job.adopt(list(current))
    index = next((i for i in range(len(entries) - 1, -1, -1) if _is_own(entries[i], shape, targets)), None)
    if index is None:
        if shape.has_runtime_patches and len(entries) >= MAX_RUNTIME_PATCHES:
            return None
        entry = job.adopt(_new_entry(shape, targets))
        entries.append(entry)
    elif job.made(entries[index]):
        entry = entries[index]
    else:
        entry = entries[index] = job.adopt(copy.deepcopy(entries[index]))
    spec[field] = entries
    return entry


def _new_entry(shape: ApiShape, targets: Sequence[str]) -> dict[str, Any]:
    if not shape.has_runtime_patches:
        return {"targetJobs": [{"name": name} for name in targets],
                "metadata": {"annotations": {V2_1_MARKER: MANAGER}}}
    jobs = [{"name": name, "template": {"spec": {"template": {}}}} for name in targets]
    return {"manager": MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}}}


def _is_own(entry: Any, shape: ApiShape, targets: Sequence[str]) -> bool:
    if not is_mapping(entry):
        return False
    if shape.has_runtime_patches:
        return entry.get("manager") == MANAGER
    named = [t.get("name") for t in sequence(entry, "targetJobs") if isinstance(t, Mapping)]
    annotations = (entry.get("metadata") or {}).get("annotations") if isinstance(entry.get("metadata"), Mapping) else None
    return named == list(targets) and isinstance(annotations, Mapping) and annotations.get(V2_1_MARKER) == MANAGER


def _pod_templates(entry: dict[str, Any], shape: ApiShape, targets: Sequence[str]) -> list[dict[str, Any]]:
    """The pod template maps of ``targets`` in our entry, created where missing."""
    if not shape.has_runtime_patches:
        return [entry]  # one override: its metadata and spec go to every target job
    jobs = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pods = []
    for name in targets:
        job = next((j for j in jobs if j.get("name") == name), None)
        if job is None:
            job = {"name": name, "template": {"spec": {"template": {}}}}
            jobs.append(job)
        pods.append(job.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {}))
    return pods
