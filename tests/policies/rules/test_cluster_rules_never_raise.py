"""The cluster-aware rules never raise, whatever the job (anything the shape check lets through)
and whatever the cluster holds: quotas with odd keys, scopes and values, LimitRanges of any
type, nodes with any labels and taints, other MPIJobs in any state."""
from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies import messages
from policies.interface import Action, Finding
from policies.cluster_view import StaticClusterView
from policies.registry import RULES, default_settings
from policies.mpijob.crd_type_check import check_shape
from testing.builders import context, mpijob
from tests.policies.rules.test_rules_never_raise import names, spec

CLUSTER_RULES = [rule for rule in RULES if rule.needs_cluster]
SETTINGS = default_settings()
NAMESPACE = "team-a"

short = st.text("abcdefghij-./", min_size=1, max_size=10)
amounts = st.integers(min_value=-2, max_value=64) | st.sampled_from(["1", "0.5", "500m", "4Gi", "0", "x", ""])
quota_keys = st.sampled_from(["pods", "count/pods", "cpu", "requests.cpu", "limits.cpu", "memory", "requests.memory",
                              "limits.memory", "requests.nvidia.com/gpu", "count/mpijobs.kubeflow.org",
                              "requests.ephemeral-storage", "hugepages-2Mi", "services"]) | short
resources = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "amd.com/gpu", "example.com/fpga"]) | short
scope_names = st.sampled_from(["Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass",
                               "CrossNamespacePodAffinity", "VolumeAttributesClass"]) | short
operators = st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]) | short

quota = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": short}),
    "spec": st.fixed_dictionaries({"hard": st.dictionaries(quota_keys, amounts, max_size=3)}, optional={
        "scopes": st.lists(scope_names, max_size=2),
        "scopeSelector": st.fixed_dictionaries({"matchExpressions": st.lists(st.fixed_dictionaries(
            {"scopeName": scope_names, "operator": operators}, optional={"values": st.lists(short, max_size=2)}),
            max_size=2)}),
    }),
}, optional={"status": st.fixed_dictionaries({"used": st.dictionaries(quota_keys, amounts, max_size=4)})})
limit_item = st.fixed_dictionaries({"type": st.sampled_from(["Container", "Pod", "PersistentVolumeClaim"]) | short},
                                   optional={k: st.dictionaries(resources, amounts, max_size=2) for k in
                                             ("min", "max", "default", "defaultRequest", "maxLimitRequestRatio")})
limit_range = st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": short}),
                                     "spec": st.fixed_dictionaries({"limits": st.lists(limit_item, max_size=3)})})
taint = st.fixed_dictionaries({"key": short, "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"])},
                              optional={"value": short})
node = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": short}, optional={"labels": st.dictionaries(short, short, max_size=2)}),
    "spec": st.fixed_dictionaries({}, optional={"taints": st.lists(taint, max_size=2), "unschedulable": st.booleans()}),
    "status": st.fixed_dictionaries({"allocatable": st.dictionaries(resources, amounts, max_size=4)}),
})
condition = st.fixed_dictionaries({"type": st.sampled_from(["Created", "Running", "Suspended", "Succeeded", "Failed"]),
                                   "status": st.sampled_from(["True", "False"])})
queue = st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": short})})


@st.composite
def clusters(draw):
    other_jobs = [{**mpijob(draw(short), workers=draw(st.integers(-1, 8)),
                            worker_resources={"limits": draw(st.dictionaries(resources, amounts, max_size=2))}),
                   "status": {"conditions": draw(st.lists(condition, max_size=3))}}
                  for _ in range(draw(st.integers(0, 2)))]
    return StaticClusterView(
        quotas={NAMESPACE: draw(st.lists(quota, max_size=2))},
        ranges={NAMESPACE: draw(st.lists(limit_range, max_size=2))},
        node_list=draw(st.lists(node, max_size=2)),
        queues=draw(st.none() | st.just({NAMESPACE: draw(st.lists(queue, max_size=2))})),
        jobs={NAMESPACE: other_jobs},
    )


# ~30 ms an example, nearly all of it generating the job and the cluster: CI runs 300
@settings(max_examples=min(settings.default.max_examples, 300))
@given(spec, names, clusters(), st.sampled_from(["CREATE", "UPDATE"]), st.none() | spec)
def test_cluster_rules_never_raise_and_findings_are_well_formed(job_spec, name, cluster, operation, old_spec):
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name}, "spec": job_spec}
    assume(not check_shape(job))
    old = {"metadata": {"name": name}, "spec": old_spec} if old_spec is not None else None
    ctx = context(job, settings=SETTINGS, cluster=cluster, name=name, operation=operation, old=old,
                  namespace=NAMESPACE)
    for rule in CLUSTER_RULES:
        for finding in rule.check(ctx):
            assert isinstance(finding, Finding)
            assert finding.rule == rule.id and finding.message
            line = messages.line(finding)
            if finding.ceiling is Action.WARN or SETTINGS.action(rule.id) is Action.WARN:
                assert len(line) <= 256, line
