"""What the cluster-aware rules derive from cluster snapshots (parsed quotas, jobs in flight, node
capacities, queue names) is kept between requests: answering from it must give exactly what
deriving afresh gives, whatever the job and whatever the cluster holds."""
from __future__ import annotations

import copy

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies.cluster_view import StaticClusterView
from policies.mpijob.crd_type_check import check_shape
from testing.builders import context
from tests.policies.rules.test_cluster_rules_never_raise import CLUSTER_RULES, NAMESPACE, SETTINGS, clusters
from tests.policies.rules.test_rules_never_raise import names, spec


def fresh(cluster: StaticClusterView) -> StaticClusterView:
    """The same state in new objects: nothing derived before can be found for it."""
    return copy.deepcopy(cluster)


# ~30 ms an example, nearly all of it generating the job and the cluster: CI runs 300
@settings(max_examples=min(settings.default.max_examples, 300))
@given(spec, names, clusters(), st.sampled_from(["CREATE", "UPDATE"]), st.none() | spec,
       st.none() | st.sampled_from(["default", "gpu"]))
def test_answers_from_derived_state_equal_answers_from_fresh_state(job_spec, name, cluster, operation, old_spec,
                                                                   queue):
    job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name}, "spec": job_spec}
    if queue is not None:
        job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    assume(not check_shape(job))
    old = {"metadata": {"name": name}, "spec": old_spec} if old_spec is not None else None

    def findings(view: StaticClusterView) -> list:
        ctx = context(job, settings=SETTINGS, cluster=view, name=name, operation=operation, old=old,
                      namespace=NAMESPACE)
        return [finding for rule in CLUSTER_RULES for finding in rule.check(ctx)]

    first = findings(cluster)
    assert findings(cluster) == first  # the second time from what was derived
    assert findings(fresh(cluster)) == first
