"""Parity on generated jobs: the exported policies and the webhook's static rules give the
same rule ids, per action, for any job the API server would admit to validation; and the
generated jobs reach every exported check (a parity test that only saw valid jobs would test
nothing)."""
from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, Phase, assume, event, example, given, settings
from hypothesis import strategies as st

from tests.vap.corpus import namespaces
from tests.vap.failed_checks import checks, naming_checks
from tests.vap.test_gpu_amounts import worker_gpus
from tests.vap.strategies import gpus_before_init, jobs
from tests.vap.test_parity import POLICIES, exported
from tests.vap.verdicts import admissible, vap_review, vap_verdict, webhook_lines, webhook_verdict
from webhook.cel import cel_runtime as evaluator

# cel-python raises the recursion limit when its first environment is made; made here, before
# hypothesis records the limit it restores after each example.
evaluator.compile_expression("true")

POLICY_NAMES = ("built-in", "actions-and-overrides")
# An example evaluates every exported policy in a CEL interpreter: about 0.2 s of CPU (measured
# on a 2-core machine: 60 examples in 12 s of CPU; 500 in 6 minutes at a load average of 10).
# The profile's count over 20: 500 examples in the ci profile (under 2 minutes on an idle
# core), 20 in the default run.
PARITY = settings(max_examples=max(20, settings().max_examples // 20))
# The checks a generated CREATE cannot fail: on UPDATE only (tests/vap/test_parity.py's
# UPDATE cases fail it).
UPDATE_ONLY = {"[run-policy] the MPIJob fails the managedByUnchanged check of run-policy"}
# Fixed (derandomized), so the coverage test answers the same on every run; large enough that
# the rarest check (a negative minResources) is failed at all. Another hypothesis version may
# draw another sample: if it misses a check, look at the strategy's odds before the count.
COVERAGE_SAMPLE = 60


def _reviewable(job: dict[str, Any]) -> None:
    assume(admissible(job) == [])
    # The one count the exported policy leaves to the webhook (docs/vap.md).
    assume(not gpus_before_init(job))


def sidecar_gpus(amount: int) -> dict[str, Any]:
    job = worker_gpus()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"] = {
        "containers": [{"name": "c-0", "image": "busybox"}],
        "initContainers": [{"name": "init-0", "image": "busybox", "restartPolicy": "Always",
                            "resources": {"limits": {"nvidia.com/gpu": amount}}}]}
    return job


CASES = [(policy_name, namespace, labels) for policy_name in POLICY_NAMES
         for namespace, labels in namespaces(POLICIES[policy_name])]


@PARITY
@given(job=jobs(), case=st.sampled_from(CASES))
# Found here: the webhook counted 0.5 GPU in the pod's total (17.5, shown as 17) and, the sum
# of the containers being 17.5, blamed the init containers; the policy counts it 0 and names
# the one container.
@example(job=worker_gpus("500m", 17), case=("built-in", "team-a", {}))
# Found here: a sidecar that alone asks for too many GPUs; the webhook names its field, the
# policy named the pod.
@example(job=sidecar_gpus(20), case=("built-in", "team-a", {}))
def test_generated_jobs_get_the_webhooks_rule_ids(job: dict[str, Any], case: tuple[str, str, dict[str, str]]) -> None:
    _reviewable(job)
    policy_name, namespace, labels = case
    expected = webhook_verdict(POLICIES[policy_name], job, namespace, labels)
    for action, rules in sorted(expected.items()):
        for rule in sorted(rules):
            event(f"{action} {rule}")
    if not any(expected.values()):
        event("admitted")
    result = vap_review(exported(policy_name), job, namespace, labels)
    assert vap_verdict(result) == expected
    # Each message names the path of one of the webhook's findings of that rule.
    lines = webhook_lines(POLICIES[policy_name], job, namespace, labels)
    for answer in result.answers:
        assert any(answer.message.startswith(line) for line in lines), (answer.message, lines)


def test_generated_jobs_fail_every_exported_check() -> None:
    named = {name: naming_checks(exported(name)) for name in POLICY_NAMES}
    failed: Counter[str] = Counter()

    @settings(max_examples=COVERAGE_SAMPLE, derandomize=True, database=None, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(job=jobs(), policy_name=st.sampled_from(POLICY_NAMES))
    def sample(job: dict[str, Any], policy_name: str) -> None:
        _reviewable(job)
        result = vap_review(named[policy_name], job, "team-a")
        assert vap_verdict(result) == webhook_verdict(POLICIES[policy_name], job, "team-a")
        failed.update({answer.message for answer in result.answers})

    sample()
    every = set().union(*(checks(objects) for objects in named.values()))
    assert UPDATE_ONLY <= every
    assert sorted(every - UPDATE_ONLY - set(failed)) == []
