"""What Kueue writes to an MPIJob it admits or stops, so an UPDATE that changes nothing else can be
told apart from a user's edit.

Kueue's MPIJob integration (``pkg/controller/jobs/mpijob``) is a plain GenericJob: its job
reconciler (``jobframework``) starts a job with one update, ``RunWithPodSetsInfo`` —
``spec.runPolicy.suspend: false`` and, on the Launcher's and the Worker's pod template, the
pod-set info merged in (``pkg/podset``: the flavors' node labels into ``nodeSelector``, their
``tolerations``, the ``kueue.x-k8s.io/podset`` label and others, topology ``schedulingGates``
and annotations, admission checks' label, annotation, nodeSelector and toleration updates) —
and stops it (preemption, eviction, deactivation) with another: ``suspend: true`` and
``RestorePodSetsInfo``, the same five template fields put back as they were. It never touches
anything else of the spec (not affinity, resources, counts or images).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Kueue's pod sets of an MPIJob, by replica type (orderedReplicaTypes: Launcher, then Worker).
KUEUE_REPLICA_TYPES = ("Launcher", "Worker")
TEMPLATE_METADATA_FIELDS = ("labels", "annotations")
TEMPLATE_SPEC_FIELDS = ("nodeSelector", "tolerations", "schedulingGates")


def only_kueue_changes(old: Any, new: Any) -> bool:
    """Whether the MPIJob ``new`` differs from ``old`` in its spec only where Kueue writes when it
    starts or stops a job. Both are the v2beta1 objects as the rules see them; anything that is
    not shaped like an MPIJob where Kueue writes is "not only Kueue's" (checked as usual)."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return False
    old_spec, new_spec = old.get("spec"), new.get("spec")
    if not isinstance(old_spec, Mapping) or not isinstance(new_spec, Mapping):
        return False
    return _without_kueue_fields(old_spec) == _without_kueue_fields(new_spec)


def _without_kueue_fields(spec: Mapping[str, Any]) -> Any:
    """A copy of ``spec`` without what Kueue writes (only the mappings on the way are copied).
    A template metadata left empty, or holding only ``creationTimestamp: null`` (what a Go
    client writes for an unset ObjectMeta), counts as absent."""
    stripped = dict(spec)
    run_policy = spec.get("runPolicy")
    if isinstance(run_policy, Mapping):
        stripped["runPolicy"] = {k: v for k, v in run_policy.items() if k != "suspend"}
    replicas = spec.get("mpiReplicaSpecs")
    if isinstance(replicas, Mapping):
        stripped["mpiReplicaSpecs"] = {
            name: _replica_without_kueue_fields(replica) if name in KUEUE_REPLICA_TYPES else replica
            for name, replica in replicas.items()}
    return stripped


def _replica_without_kueue_fields(replica: Any) -> Any:
    template = replica.get("template") if isinstance(replica, Mapping) else None
    if not isinstance(template, Mapping):
        return replica
    stripped_template = dict(template)
    metadata = template.get("metadata")
    if isinstance(metadata, Mapping):
        kept = {k: v for k, v in metadata.items()
                if k not in TEMPLATE_METADATA_FIELDS and not (k == "creationTimestamp" and v is None)}
        if kept:
            stripped_template["metadata"] = kept
        else:
            del stripped_template["metadata"]
    pod_spec = template.get("spec")
    if isinstance(pod_spec, Mapping):
        stripped_template["spec"] = {k: v for k, v in pod_spec.items() if k not in TEMPLATE_SPEC_FIELDS}
    return {**replica, "template": stripped_template}
