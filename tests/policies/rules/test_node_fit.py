import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies import messages
from policies.interface import Action, Problem
from policies.cluster_view import StaticClusterView
from policies.engine import evaluate
from policies.rules.node_fit import NodeFit, blocking_taints, placement_problem
from policies.registry import default_settings
from testing.builders import context, mpijob
from testing.kube_objects import container_limits, limit_range, node

RULE = NodeFit()
WORKER_SPEC = "spec.mpiReplicaSpecs[Worker].template.spec"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
CLUSTER = [
    node("cpu-1", {"cpu": "16", "memory": "64Gi", "pods": "110"}),
    node("gpu-a", {"cpu": "31500m", "memory": "251Gi", "nvidia.com/gpu": "8", "pods": "110"},
         labels={"gpu": "a100"}, taints=[GPU_TAINT]),
    node("gpu-b", {"cpu": "15", "memory": "120Gi", "nvidia.com/gpu": "4", "pods": "110"},
         labels={"gpu": "a100"}, taints=[GPU_TAINT]),
]
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def check(job, nodes=CLUSTER, ranges=()):
    return list(RULE.check(context(job, cluster=StaticClusterView(node_list=nodes, ranges={"team-a": list(ranges)}))))


def gpu_worker_job(limits, *, tolerations=TOLERATE_GPU, selector=None):
    job = mpijob(workers=2, worker_resources={"limits": limits})
    spec = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    if tolerations:
        spec["tolerations"] = tolerations
    if selector:
        spec["nodeSelector"] = selector
    return job


def test_a_pod_that_fits_a_matching_node_is_clean():
    assert check(gpu_worker_job({"cpu": 30, "memory": "200Gi", "nvidia.com/gpu": 8}, selector={"gpu": "a100"})) == []


def test_too_big_for_every_matching_node_names_the_largest():
    (finding,) = check(gpu_worker_job({"cpu": 32, "memory": "256Gi", "nvidia.com/gpu": 8}, selector={"gpu": "a100"}))
    assert finding.path == WORKER_SPEC and finding.problem is Problem.POLICY
    assert finding.message == ("no matching node can hold a Worker pod (cpu 32, memory 256Gi); largest of 2 matching: "
                               "gpu-a with cpu 31500m, memory 251Gi; use more, smaller pods or larger nodes")
    assert len(messages.line(finding)) <= 256


def test_untolerated_taints_rule_nodes_out():
    job = gpu_worker_job({"cpu": 8, "nvidia.com/gpu": 2}, tolerations=None)
    (finding,) = check(job)
    assert finding.message == ("no matching node can hold a Worker pod (nvidia.com/gpu 2); nodes with room are ruled "
                               "out: taint nvidia.com/gpu=present:NoSchedule not tolerated on 2 of 2 nodes; fix its "
                               "nodeSelector, affinity or tolerations")
    gpu_only = [n for n in CLUSTER if n["metadata"]["name"] != "cpu-1"]
    launcher, worker = check(job, nodes=gpu_only)  # neither pod tolerates the GPU taint
    finding = worker
    assert finding.path == WORKER_SPEC
    assert finding.message == ("no node can ever run a Worker pod: taint nvidia.com/gpu=present:NoSchedule not "
                               "tolerated on 2 of 2 nodes; fix its nodeSelector, affinity or tolerations")


def test_node_selector_without_any_match():
    (finding,) = check(gpu_worker_job({"cpu": 1}, selector={"gpu": "h100"}))
    assert finding.message.startswith("no node can ever run a Worker pod: no label gpu=h100 on 3 of 3 nodes")


def test_required_node_affinity_picks_the_nodes():
    job = gpu_worker_job({"cpu": 20})
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-b"]}]}]}}}
    (finding,) = check(job)
    assert finding.message == ("no matching node can hold a Worker pod (cpu 20); nodes with room are ruled out: not "
                               "matched by the required node affinity on 1 of 1 node; fix its nodeSelector, affinity "
                               "or tolerations")
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = 40
    (finding,) = check(job)
    assert "(cpu 40); largest of 1 matching: gpu-b with cpu 15;" in finding.message


def test_a_gpu_no_node_advertises_is_a_warning_naming_it():
    (finding,) = check(gpu_worker_job({"cpu": 1, "amd.com/gpu": 1}))
    assert finding.ceiling is Action.WARN
    assert finding.message.startswith("amd.com/gpu is requested but no node in the cluster advertises it")


def test_node_fit_is_a_warning_by_default_and_may_deny():
    job = gpu_worker_job({"cpu": 64}, selector={"gpu": "a100"})
    cluster = StaticClusterView(node_list=CLUSTER)
    verdict = evaluate(context(job, cluster=cluster))
    assert verdict.allowed and [f.rule for f in verdict.warnings] == ["node-fit"]
    strict = default_settings().with_rule("node-fit", action=Action.DENY)
    assert [f.rule for f in evaluate(context(job, cluster=cluster, settings=strict)).denials] == ["node-fit"]


def test_limit_range_defaults_count_for_the_fit():
    job = gpu_worker_job({"cpu": 1}, selector={"gpu": "a100"})
    gpus = limit_range("gpu-max", container_limits(max={"nvidia.com/gpu": "16"}))
    findings = check(job, ranges=[gpus])
    assert any("(nvidia.com/gpu 16); largest of 2 matching: gpu-a with nvidia.com/gpu 8;" in f.message
               for f in findings)


def test_launcher_checked_unless_turned_off():
    job = mpijob(workers=2)
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": 100}}
    (finding,) = check(job)
    assert finding.path == "spec.mpiReplicaSpecs[Launcher].template.spec"
    settings = default_settings().with_rule("node-fit", check_launcher=False)
    assert list(RULE.check(context(job, cluster=StaticClusterView(node_list=CLUSTER), settings=settings))) == []


def test_no_nodes_known_says_nothing():
    assert check(gpu_worker_job({"cpu": 1000}), nodes=[]) == []


@pytest.mark.parametrize(("pod", "node_obj", "problem"), [
    ({"nodeSelector": {"a": "b"}}, node("n", {}, labels={"a": "b"}), None),
    ({}, node("n", {}, unschedulable=True), "taint node.kubernetes.io/unschedulable:NoSchedule not tolerated"),
    ({"tolerations": [{"operator": "Exists"}]}, node("n", {}, unschedulable=True), None),
    ({}, node("n", {}, taints=[{"key": "k", "effect": "PreferNoSchedule"}]), None),
    ({"tolerations": [{"key": "k", "value": "v", "effect": "NoExecute"}]},
     node("n", {}, taints=[{"key": "k", "value": "v", "effect": "NoExecute"}]), None),
    ({"tolerations": [{"key": "k", "value": "w"}]},
     node("n", {}, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]), "taint k=v:NoSchedule not tolerated"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}]}}}},
     node("n", {}, labels={"cores": "16"}), None),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}]}]}}}},
     node("n", {}, labels={"zone": "a"}), "not matched by the required node affinity"),
], ids=["selector", "cordoned", "tolerate-all", "prefer-no-schedule", "no-execute-tolerated", "wrong-value",
        "gt", "terms-or"])
def test_placement(pod, node_obj, problem):
    assert placement_problem(pod, node_obj) == problem


def test_a_changed_node_is_seen_on_the_next_check():
    """Node capacities are derived once per snapshot of the nodes; a new snapshot is read anew."""
    job = gpu_worker_job({"cpu": 48, "nvidia.com/gpu": 8}, selector={"gpu": "a100"})
    (finding,) = check(job)
    assert "largest of 2 matching: gpu-a with cpu 31500m" in finding.message
    assert len(check(job)) == 1  # answered from what was derived
    grown = [CLUSTER[0], node("gpu-a", {"cpu": "64", "memory": "251Gi", "nvidia.com/gpu": "8"}, labels={"gpu": "a100"},
                              taints=[GPU_TAINT]), CLUSTER[2]]
    assert check(job, nodes=grown) == []
    cordoned = [CLUSTER[0], node("gpu-a", {"cpu": "64", "memory": "251Gi", "nvidia.com/gpu": "8"},
                                 labels={"gpu": "a100"}, taints=[GPU_TAINT], unschedulable=True), CLUSTER[2]]
    (finding,) = check(job, nodes=cordoned)
    assert ("nodes with room are ruled out: taint node.kubernetes.io/unschedulable:NoSchedule not tolerated "
            "on 1 of 1 node") in finding.message


def test_a_resource_advertised_later_is_seen_on_the_next_check():
    job = gpu_worker_job({"cpu": 1, "amd.com/gpu": 1})
    (finding,) = check(job)
    assert finding.message.startswith("amd.com/gpu is requested but no node in the cluster advertises it")
    assert check(job, nodes=[*CLUSTER, node("amd-1", {"cpu": "16", "amd.com/gpu": "4"})]) == []


@pytest.mark.parametrize("node_obj", [
    node("n", {}), node("n", {}, unschedulable=True),
    node("n", {}, taints=[{"key": "k", "effect": "PreferNoSchedule"},
                          {"key": "k", "value": "v", "effect": "NoExecute"}]),
    node("n", {}, taints=[GPU_TAINT], unschedulable=True),
], ids=["untainted", "cordoned", "mixed-effects", "tainted-and-cordoned"])
@pytest.mark.parametrize("pod", [{}, {"tolerations": TOLERATE_GPU}, {"tolerations": [{"operator": "Exists"}]},
                                 {"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute"}]}],
                         ids=["none", "gpu", "all", "k-no-execute"])
def test_placement_with_the_taints_worked_out_before_is_the_same(pod, node_obj):
    assert placement_problem(pod, node_obj, blocking_taints(node_obj)) == placement_problem(pod, node_obj)


def test_pods_with_the_same_placement_fields_share_it_and_others_do_not():
    # Both pods are ruled out by the same selector: each gets its own finding, with its own path.
    job = gpu_worker_job({"cpu": 2}, selector={"zone": "nowhere"})
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["nodeSelector"] = {"zone": "nowhere"}
    launcher, worker = check(job)
    assert launcher.path == "spec.mpiReplicaSpecs[Launcher].template.spec" and worker.path == WORKER_SPEC
    assert launcher.message == ("no node can ever run a Launcher pod: no label zone=nowhere on 3 of 3 nodes; "
                                "fix its nodeSelector, affinity or tolerations")
    assert worker.message == launcher.message.replace("Launcher", "Worker")
    # Equal selectors but different tolerations: the launcher may not go where the worker may.
    job = gpu_worker_job({"cpu": 30}, selector={"gpu": "a100"})
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["nodeSelector"] = {"gpu": "a100"}
    (launcher,) = check(job)
    assert launcher.message == ("no node can ever run a Launcher pod: taint nvidia.com/gpu=present:NoSchedule not "
                                "tolerated on 2 of 3 nodes; fix its nodeSelector, affinity or tolerations")


# --- pods looked at together are judged as each alone ------------------------------------------
# The placement of a pod on each node is shared by the pods with the same placement fields, and
# for pods without any is worked out once per snapshot: whatever the mix, each pod's finding is
# the one it gets alone, and a pod fits exactly when some node both takes and holds it.

_zones = st.sampled_from(["a", "b"])
_taint = st.fixed_dictionaries({"key": st.sampled_from(["gpu", "spot"]), "effect": st.sampled_from(
    ["NoSchedule", "NoExecute", "PreferNoSchedule"])})
_node = st.fixed_dictionaries({"cpu": st.integers(1, 8), "zone": st.none() | _zones,
                               "taints": st.lists(_taint, max_size=2), "unschedulable": st.booleans()})
_template = st.fixed_dictionaries({"cpu": st.integers(1, 8)}, optional={
    "nodeSelector": st.fixed_dictionaries({"zone": _zones}),
    "tolerations": st.lists(st.fixed_dictionaries({"key": st.sampled_from(["gpu", "spot"]),
                                                   "operator": st.just("Exists")}), max_size=2)})


def _pod_spec(template):
    fields = {k: v for k, v in template.items() if k != "cpu"}
    return {**fields, "containers": [{"name": "main", "image": "x", "resources": {"limits": {
        "cpu": template["cpu"], "memory": "1Gi"}}}]}


def _nodes(specs):
    return [node(f"n{i}", {"cpu": n["cpu"], "memory": "8Gi", "pods": "110"},
                 labels={"zone": n["zone"]} if n["zone"] else None, taints=n["taints"] or None,
                 unschedulable=n["unschedulable"]) for i, n in enumerate(specs)]


@given(nodes=st.lists(_node, min_size=1, max_size=4), launcher=_template, worker=_template,
       same=st.booleans())
def test_each_pod_is_judged_as_if_alone(nodes, launcher, worker, same):
    job = mpijob()
    replicas = job["spec"]["mpiReplicaSpecs"]
    replicas["Launcher"]["template"]["spec"] = _pod_spec(launcher)
    replicas["Worker"]["template"]["spec"] = _pod_spec(launcher if same else worker)
    cluster = _nodes(nodes)
    alone = []
    for replica_type in ("Launcher", "Worker"):
        single = mpijob()
        single["spec"]["mpiReplicaSpecs"] = {replica_type: replicas[replica_type]}
        found = check(single, nodes=cluster)
        template = replicas[replica_type]["template"]["spec"]
        cpu = template["containers"][0]["resources"]["limits"]["cpu"]
        fits = any(int(n["status"]["allocatable"]["cpu"]) >= cpu and placement_problem(template, n) is None
                   for n in cluster)
        assert (found == []) == fits
        alone += found
    assert check(job, nodes=cluster) == alone
