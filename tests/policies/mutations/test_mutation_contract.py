"""What the engine relies on from every mutation, and what the admin relies on from the engine:
the ``changed`` flag is honest, and a mutated job never fails validation where the request
passed (mutations create no violations)."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies import messages
from policies.interface import Mutated, NoParams
from policies.cluster_view import NO_CLUSTER, ClusterView, StaticClusterView
from policies.engine import evaluate, json_patch, mutate
from policies.mutations.edits import WorkingCopy
from policies.registry import MUTATIONS, default_settings
from policies.config.rule_settings import MutationConfig, Settings
from testing.builders import context, mpijob
from tests.conftest import upstream_v2beta1_jobs
from testing.crd import as_api_server_sends
from tests.mutation_cases import CAPPED, Case, cases

CONFIGURED = (default_settings().with_mutation("kueue-queue-label", default_queue="common-queue")
              .with_mutation("restricted-service-account", service_account="mpi-restricted"))


def verdict_lines(job: dict[str, Any], settings: Settings, cluster: ClusterView = NO_CLUSTER) -> set[str]:
    verdict = evaluate(context(job, settings=settings, name="pi", cluster=cluster))
    assert verdict.error is None
    return {f"{o.action}: {messages.line(o.finding)}" for o in verdict.outcomes}


@CAPPED
@given(cases())
def test_changed_is_reported_exactly_when_the_job_changed(case: Case):
    for mutation in MUTATIONS:
        edited = WorkingCopy(case.job)
        outcome = mutation.apply(edited, context(case.job, settings=case.settings, namespace=case.namespace))
        assert outcome.changed is (edited != case.job), mutation.id


@CAPPED
@given(cases())
def test_the_request_object_is_never_modified(case: Case):
    """The working copy shares every subtree with the request: a mutation writing anywhere but
    into the maps ``WorkingCopy.writable`` hands out would edit the request itself."""
    request = copy.deepcopy(case.job)
    result = mutate(context(request, settings=case.settings, namespace=case.namespace, name="pi"))
    assert result.job == case.expected
    assert json.dumps(request, sort_keys=True) == json.dumps(case.job, sort_keys=True)


@CAPPED
@given(cases())
def test_mutations_create_no_violations(case: Case):
    result = mutate(context(case.job, settings=case.settings, namespace=case.namespace, name="pi"))
    assert result.error is None
    assert result.job == case.expected
    assert verdict_lines(result.job, case.settings) <= verdict_lines(case.job, case.settings)


LOCAL_QUEUE = {"metadata": {"name": "team-a-queue", "namespace": "team-a"}, "spec": {"clusterQueue": "all"}}
CLUSTERS = st.sampled_from([
    StaticClusterView(queues={"team-a": [LOCAL_QUEUE]}),
    StaticClusterView(queues={"team-a": []}),
    StaticClusterView(queues=None),
])


@CAPPED
@given(cases(), CLUSTERS)
def test_mutations_create_no_violations_with_cluster_state(case: Case, cluster: StaticClusterView):
    """With the watch caches in play, cluster-aware rules (kueue-queue among them) run too."""
    job_context = context(case.job, settings=case.settings, namespace=case.namespace, name="pi", cluster=cluster)
    result = mutate(job_context)
    assert result.error is None
    assert verdict_lines(result.job, case.settings, cluster) <= verdict_lines(case.job, case.settings, cluster)


@pytest.mark.parametrize("settings", [default_settings(), CONFIGURED], ids=["default-policy", "queue-and-account"])
@pytest.mark.parametrize("name", sorted(upstream_v2beta1_jobs()))
def test_mutated_upstream_manifests_pass_validation_unchanged(name, settings):
    job = as_api_server_sends(upstream_v2beta1_jobs()[name])
    result = mutate(context(job, settings=settings))
    assert set(result.applied) == ({"istio-sidecar-off", "restricted-service-account"}
                                   | ({"kueue-queue-label"} if settings is CONFIGURED else set()))
    verdict = evaluate(context(result.job, settings=settings))
    assert verdict.allowed, [messages.line(f) for f in verdict.denials]
    assert verdict_lines(result.job, settings) <= verdict_lines(job, settings)


class _Failing:
    id = "failing"
    Params = NoParams
    enabled_by_default = True

    def apply(self, job: WorkingCopy, ctx: Any) -> Mutated:
        job.writable(("metadata",))["labels"] = {"half": "done"}
        raise RuntimeError("boom")


def test_a_failing_mutation_refuses_and_leaves_the_request_alone():
    defaults = default_settings()
    settings = Settings(defaults.rules, {**defaults.mutations, "failing": MutationConfig(True, NoParams())})
    job = mpijob()
    result = mutate(context(job, settings=settings), mutations=[*MUTATIONS, _Failing()])
    assert result.error == "mutation failing failed: RuntimeError: boom"
    assert result.job == job == mpijob()
    assert result.applied == ("istio-sidecar-off", "restricted-service-account")


def test_disabled_mutations_do_not_run():
    settings = default_settings()
    for mutation in MUTATIONS:
        settings = settings.with_mutation(mutation.id, enabled=False)
    job = mpijob()
    result = mutate(context(job, settings=settings))
    assert (result.applied, result.warnings, result.job) == ((), (), job)
    assert json_patch(job, result) == []
