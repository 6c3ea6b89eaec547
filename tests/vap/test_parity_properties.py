"""Parity on generated jobs: the exported policies and the webhook's static rules give the
same rule ids, per action, for any job the API server would admit to validation."""
from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.vap.corpus import namespaces
from tests.vap.strategies import gpus_before_init, jobs
from tests.vap.test_parity import POLICIES, exported
from tests.vap.verdicts import admissible, vap_review, vap_verdict, webhook_verdict
from webhook.cel import cel_runtime as evaluator

# cel-python raises the recursion limit when its first environment is made; made here, before
# hypothesis records the limit it restores after each example.
evaluator.compile_expression("true")

POLICY_NAMES = ("built-in", "actions-and-overrides")


# Each example evaluates eight policies in a CEL interpreter: a few dozen examples here, the
# long runs under HYPOTHESIS_PROFILE=ci.
@settings(max_examples=40)
@given(job=jobs(), policy_name=st.sampled_from(POLICY_NAMES), data=st.data())
def test_generated_jobs_get_the_webhooks_rule_ids(job, policy_name, data) -> None:
    assume(admissible(job) == [])
    assume(not gpus_before_init(job))
    namespace, labels = data.draw(st.sampled_from(namespaces(POLICIES[policy_name])))
    expected = webhook_verdict(POLICIES[policy_name], job, namespace, labels)
    assert vap_verdict(vap_review(exported(policy_name), job, namespace, labels)) == expected
