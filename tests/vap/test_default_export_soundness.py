"""The default export never refuses what the webhook admits (issue 26): where it answers less
than the webhook (the TrainJob rules it leaves out, the counts CEL cannot follow; docs/vap.md,
"Left to the webhook"), every rule it denies a generated job for, the webhook denies too.

The parity properties hold the exact answers where the checks are exact, over the whole
TrainJob set; this one holds the default export, both kinds, including the cases they exclude
(an init container's GPUs counted with the sidecars before it, TrainJobs whose GPUs the
runtime decides)."""
from __future__ import annotations

from functools import cache
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies.vap import objects
from tests.vap.corpus import namespaces
from tests.vap.strategies import jobs
from tests.vap.test_parity import POLICIES
from tests.vap.test_parity_properties import CASES
from tests.vap.test_trainjob_parity import RUNTIMES
from tests.vap.test_trainjob_parity_properties import trainjobs
from tests.vap.trainjob_corpus import params_for
from tests.vap.trainjob_verdicts import admissible as trainjob_admissible, vap_review as trainjob_vap_review
from tests.vap.trainjob_verdicts import webhook_verdict as trainjob_webhook_verdict
from tests.vap.verdicts import Verdict, admissible, vap_review, vap_verdict, webhook_verdict
from webhook.cel import cel_runtime as evaluator

# cel-python raises the recursion limit when its first environment is made; made here, before
# hypothesis records the limit it restores after each example.
evaluator.compile_expression("true")

# An MPIJob example costs about 0.2 s of CPU (every MPIJob policy in a CEL interpreter), a
# TrainJob one less (four policies per runtime): 10 each in the default run, 200 each under
# HYPOTHESIS_PROFILE=ci (about 2.5 minutes together at load average 10).
SOUNDNESS = settings(max_examples=min(settings().max_examples // 10, 200))


@cache
def default_export(policy_name: str, kind: str) -> list[dict[str, Any]]:
    return objects(POLICIES[policy_name], kinds=(kind,))


def assert_denies_only_what_the_webhook_denies(policies: Verdict, webhook: Verdict) -> None:
    assert policies.get("deny", set()) <= webhook.get("deny", set()), (policies, webhook)
    if not webhook.get("deny"):
        assert not policies.get("deny"), (policies, webhook)


@SOUNDNESS
@given(job=jobs(), case=st.sampled_from(CASES))
def test_the_default_export_admits_every_mpijob_the_webhook_admits(job: dict[str, Any],
                                                                   case: tuple[str, str, dict[str, str]]) -> None:
    assume(admissible(job) == [])
    policy_name, namespace, labels = case
    webhook = webhook_verdict(POLICIES[policy_name], job, namespace, labels)
    result = vap_review(default_export(policy_name, "MPIJob"), job, namespace, labels)
    assert_denies_only_what_the_webhook_denies(vap_verdict(result), webhook)


@SOUNDNESS
@given(trainjob=trainjobs(), policy_name=st.sampled_from(("built-in", "actions-and-overrides")), data=st.data())
def test_the_default_export_admits_every_trainjob_the_webhook_admits(trainjob: dict[str, Any], policy_name: str,
                                                                     data: st.DataObject) -> None:
    assume(trainjob_admissible(trainjob) == [])
    namespace, labels = data.draw(st.sampled_from(namespaces(POLICIES[policy_name])))
    trainjob["metadata"]["namespace"] = namespace
    # Every TrainJob rule the webhook has a CEL version of, those the default leaves out too.
    webhook = trainjob_webhook_verdict(POLICIES[policy_name], trainjob, RUNTIMES, namespace, labels, everything=True)
    result = trainjob_vap_review(default_export(policy_name, "TrainJob"), trainjob, params_for(trainjob, RUNTIMES),
                                 namespace, labels)
    assert_denies_only_what_the_webhook_denies(vap_verdict(result), webhook)
