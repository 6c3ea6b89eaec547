"""Rules never raise on anything the shape check lets through: declared fields of the right type,
in any combination, absent or present, with unknown keys beside them; and the stored object of
an UPDATE, which nobody shape-checks, may be anything at all."""
from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies import messages
from policies.interface import Action, Finding, RuleContext
from policies.registry import RULES, default_settings
from policies.mpijob.crd_type_check import check_shape
from testing.builders import context

SPEC_RULES = [rule for rule in RULES if not rule.needs_cluster]
SETTINGS = default_settings()

ints = st.integers(min_value=-(2**31), max_value=2**31)
words = st.text(max_size=12)
choices = lambda *values: st.sampled_from(values) | words  # noqa: E731 - a tiny strategy helper
quantities = st.integers(min_value=-20, max_value=40) | st.sampled_from(["1", "0.5", "500m", "4Gi", "-1", "two", ""])
resource_names = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "amd.com/gpu", "example.com/fpga",
                                  "hugepages-2Mi", "requests.nvidia.com/gpu"]) | words
resource_map = st.dictionaries(resource_names, quantities, max_size=3)
images = st.sampled_from(["mpi:1", "quay.io/o/mpi@sha256:" + "a" * 64, "", "Bad", "a//b", "x:"]) | words


def optional(**fields):
    return st.fixed_dictionaries({}, optional=fields)


container = st.fixed_dictionaries({"name": words}, optional=dict(
    image=images, restartPolicy=choices("Always"),
    resources=optional(limits=resource_map, requests=resource_map),
    unknownField=words,
))
pod_spec = st.fixed_dictionaries({"containers": st.lists(container, max_size=3)},
                                 optional={"initContainers": st.lists(container, max_size=2)})
replica_fields = {"replicas": ints, "restartPolicy": choices("Never", "OnFailure", "Always", "ExitCode")}
replica = (st.fixed_dictionaries({"template": st.fixed_dictionaries({"spec": pod_spec})}, optional=replica_fields)
           | optional(**replica_fields, template=optional(spec=optional(initContainers=st.lists(container, max_size=1)))))
replica_specs = (st.fixed_dictionaries({"Launcher": replica, "Worker": replica},
                                       optional={"Master": replica, "worker": replica})
                 | st.dictionaries(st.sampled_from(["Launcher", "Worker", "Master", ""]), replica | st.none(), max_size=3))
run_policy = optional(
    cleanPodPolicy=choices("All", "Running", "None"), ttlSecondsAfterFinished=ints, activeDeadlineSeconds=ints,
    backoffLimit=ints, suspend=st.booleans(), managedBy=choices("kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"),
    schedulingPolicy=optional(minAvailable=ints, scheduleTimeoutSeconds=ints, queue=words,
                              minResources=resource_map),
)
spec = st.fixed_dictionaries({"mpiReplicaSpecs": replica_specs}, optional=dict(
    slotsPerWorker=ints, runLauncherAsWorker=st.booleans(), sshAuthMountPath=choices("/root/.ssh"),
    launcherCreationPolicy=choices("AtStartup", "WaitForWorkersReady"),
    mpiImplementation=choices("OpenMPI", "Intel", "MPICH"), runPolicy=run_policy,
))
names = st.text("abcdefghijklmnopqrstuvwxyzABC-._0123456789", max_size=70)
json_values = st.recursive(st.none() | st.booleans() | ints | words,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3),
                           max_leaves=8)


# ~10-15 ms an example (every rule over a generated job): CI runs 1,000, not 10,000
@settings(max_examples=min(settings.default.max_examples, 1000))
@given(spec, names, st.booleans(), st.sampled_from(["CREATE", "UPDATE"]), json_values | spec.map(lambda s: {"spec": s}))
def test_rules_never_raise_and_findings_are_well_formed(job_spec, name, generated, operation, old):
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name}, "spec": job_spec}
    assume(not check_shape(job))
    ctx: RuleContext = context(job, settings=SETTINGS, name=name, generated_name=generated, operation=operation,
                               old=old if isinstance(old, dict) else None)
    for rule in SPEC_RULES:
        for finding in rule.check(ctx):
            assert isinstance(finding, Finding)
            assert finding.rule == rule.id
            assert finding.path and finding.message
            line = messages.line(finding)
            if finding.ceiling is Action.WARN:
                assert len(line) <= 256, line
