"""Generated MPIJobs that exercise every branch of the mutations, each with the object the
mutations should turn it into.

The expected object is built here from the drawn choices (what the issue asks for), never by
calling the mutations, so a test comparing the two checks the mutations against the spec.
Every job is valid for the v2beta1 CRD schema; the key alphabet includes ``/`` and ``~`` (the
characters JSON Pointer escapes), empty keys and keys that look like escapes.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from policies.config.rule_settings import Settings
from policies.registry import default_settings
from testing.builders import mpijob

INJECT = "sidecar.istio.io/inject"
QUEUE = "kueue.x-k8s.io/queue-name"
ASKS_FOR_SIDECAR = {"true", "yes", "y", "on"}
OURS = {INJECT, QUEUE}
ABSENT = None  # a drawn choice meaning "the key is not there at all"
DEFAULTS = default_settings()
# Drawing one case costs ~3 ms: the CI profile's 10,000 examples are capped for these tests.
CAPPED = hypothesis_settings(max_examples=min(hypothesis_settings().max_examples, 2_000))

keys = st.one_of(
    st.sampled_from(["a/b", "~0", "~1", "a~/b", "x/y/z", "", "~", "/", "example.com/a~b", "app"]),
    st.text(alphabet="ab/~.-_0", max_size=8),
).filter(lambda key: key not in OURS)
string_maps = st.dictionaries(keys, st.text(alphabet="ab~/ 0", max_size=5), max_size=3)
inject_values = st.sampled_from([ABSENT, "true", "TRUE", "yes", "On", "false", "no", "", "maybe"])
dns_names = st.sampled_from(["trainer", "a", "sa-1", "team.reader"])  # values only: their spelling never matters


@dataclass(frozen=True)
class Case:
    job: dict[str, Any]
    expected: dict[str, Any]
    settings: Settings
    namespace: str

    @property
    def changes(self) -> bool:
        return self.job != self.expected


@st.composite
def template_metadata(draw: st.DrawFn) -> dict[str, Any] | None:
    """Pod template metadata: absent, empty, or labels/annotations maps with an inject choice."""
    form = draw(st.sampled_from(["absent", "empty", "maps"]))
    if form == "absent":
        return ABSENT
    metadata: dict[str, Any] = {}
    if form == "maps":
        for field in ("labels", "annotations"):
            if draw(st.booleans()):
                entries = draw(string_maps)
                value = draw(inject_values)
                if value is not ABSENT:
                    entries[INJECT] = value
                metadata[field] = entries
    return metadata


@st.composite
def pod_fields(draw: st.DrawFn) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    automount = draw(st.sampled_from([ABSENT, True, False]))
    if automount is not ABSENT:
        fields["automountServiceAccountToken"] = automount
    name = draw(st.one_of(st.just(ABSENT), st.just(""), dns_names))
    if name is not ABSENT:
        fields["serviceAccountName"] = name
    if draw(st.booleans()):
        fields["serviceAccount"] = draw(dns_names)
    return fields


@st.composite
def job_metadata(draw: st.DrawFn) -> dict[str, Any] | None:
    form = draw(st.sampled_from(["absent", "name-only", "labelled"]))
    if form == "absent":
        return ABSENT
    metadata: dict[str, Any] = {"name": "pi"}
    if form == "labelled":
        labels = draw(string_maps)
        queue = draw(st.sampled_from([ABSENT, "users-queue", ""]))
        if queue is not ABSENT:
            labels[QUEUE] = queue
        metadata["labels"] = labels
        if draw(st.booleans()):
            metadata["annotations"] = draw(string_maps)
    return metadata


@st.composite
def settings(draw: st.DrawFn) -> Settings:
    chosen = DEFAULTS.with_mutation("istio-sidecar-off", enabled=draw(st.booleans()),
                                  keep_explicit_true=draw(st.booleans()))
    chosen = chosen.with_mutation("kueue-queue-label", enabled=draw(st.booleans()),
                                  queues=draw(st.sampled_from([{}, {"team-a": "team-a-queue"}])),
                                  default_queue=draw(st.sampled_from([None, "common-queue"])))
    return chosen.with_mutation("restricted-service-account", enabled=draw(st.booleans()),
                                service_account=draw(st.sampled_from([None, "mpi-restricted"])))


# Built once: a strategy made inside every draw would be analysed afresh each time.
TEMPLATE_METADATA = template_metadata()
POD_FIELDS = pod_fields()
JOB_METADATA = job_metadata()
SETTINGS = settings()


@st.composite
def cases(draw: st.DrawFn) -> Case:
    with_worker = draw(st.booleans())
    job = mpijob(runLauncherAsWorker=not with_worker)
    replicas = job["spec"]["mpiReplicaSpecs"]
    if not with_worker:
        del replicas["Worker"]
    if draw(st.booleans()):  # not the operator's: must be left exactly as it is
        replicas["Master"] = {"replicas": 1, "template": {
            "metadata": {"labels": {INJECT: "true"}},
            "spec": {"containers": [{"name": "m", "image": "busybox"}], "automountServiceAccountToken": True}}}
    for replica_type in ("Launcher", "Worker"):
        if replica_type in replicas:
            template = replicas[replica_type]["template"]
            metadata = draw(TEMPLATE_METADATA)
            if metadata is not ABSENT:
                template["metadata"] = metadata
            template["spec"].update(draw(POD_FIELDS))
    metadata = draw(JOB_METADATA)
    if metadata is ABSENT:
        del job["metadata"]
    else:
        job["metadata"] = metadata
    chosen = draw(SETTINGS)
    namespace = draw(st.sampled_from(["team-a", "team-b"]))
    return Case(job, expected_job(job, chosen, namespace), chosen, namespace)


def expected_job(job: dict[str, Any], chosen: Settings, namespace: str) -> dict[str, Any]:
    """What the issue says each mutation does, written out plainly."""
    expected = copy.deepcopy(job)
    if chosen.enabled("kueue-queue-label"):
        params = chosen.params("kueue-queue-label")
        queue = params.queues.get(namespace, params.default_queue)
        labels = expected.get("metadata", {}).get("labels", {})
        if queue is not None and QUEUE not in labels:
            expected.setdefault("metadata", {}).setdefault("labels", {})[QUEUE] = queue
    for replica_type in ("Launcher", "Worker"):
        replica = expected["spec"]["mpiReplicaSpecs"].get(replica_type)
        if replica is None:
            continue
        template = replica["template"]
        if chosen.enabled("istio-sidecar-off"):
            metadata = template.get("metadata", {})
            asked = any(metadata.get(field, {}).get(INJECT, "").lower() in ASKS_FOR_SIDECAR
                        for field in ("labels", "annotations"))
            if not (asked and chosen.params("istio-sidecar-off").keep_explicit_true):
                template.setdefault("metadata", {}).setdefault("labels", {})[INJECT] = "false"
                template["metadata"].setdefault("annotations", {})[INJECT] = "false"
        if chosen.enabled("restricted-service-account"):
            pod = template["spec"]
            pod.setdefault("automountServiceAccountToken", False)
            account = chosen.params("restricted-service-account").service_account
            if account and not pod.get("serviceAccountName") and not pod.get("serviceAccount"):
                pod["serviceAccountName"] = account
    return expected
