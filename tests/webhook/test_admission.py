"""Admission's own flow: each request decided once, timed, and handed to every observer; an
observer failing changes nothing, a failure while deciding refuses."""
import logging
import time

import pytest

from policies.cluster_view import NO_CLUSTER
from policies.config.layered_policy import Policy
from testing.builders import admission_review, mpijob
from webhook.admission import Admission, Decision
from webhook.review import parse_admission_review


def request(**job_args):
    return parse_admission_review(admission_review(mpijob(**job_args)))


def broken_observer(decision: Decision) -> None:
    raise RuntimeError("audit sink is full")


@pytest.mark.parametrize("endpoint", ["validate", "mutate"])
def test_every_observer_gets_the_one_timed_decision_even_after_one_fails(endpoint, caplog):
    seen: list[Decision] = []
    admission = Admission(policy=Policy, cluster=NO_CLUSTER, observers=[seen.append, broken_observer, seen.append])
    quiet = Admission(policy=Policy, cluster=NO_CLUSTER)
    req = request()
    started = time.perf_counter()
    with caplog.at_level(logging.ERROR, logger="webhook.admission"):
        response = getattr(admission, endpoint)(req)
    took = time.perf_counter() - started
    assert response == getattr(quiet, endpoint)(req)
    first, again = seen
    assert first is again
    assert (first.endpoint, first.request, first.allowed, first.reason) == (endpoint, req, True, "checked")
    assert 0 < first.seconds <= took
    assert [r.getMessage() for r in caplog.records] == ["decision observer failed"]


def test_a_denial_reaches_the_observers_with_its_verdict():
    seen: list[Decision] = []
    admission = Admission(policy=Policy, cluster=NO_CLUSTER, observers=[seen.append])
    response = admission.validate(request(slots=9))
    (decision,) = seen
    assert response["response"]["allowed"] is False
    assert (decision.allowed, decision.reason) == (False, "checked")
    assert [(f.rule, f.path) for f in decision.verdict.denials] == [("slots-per-worker", "spec.slotsPerWorker")]
    assert decision.verdict.skipped and decision.mutation is None and decision.patch_ops == 0


@pytest.mark.parametrize("endpoint", ["validate", "mutate"])
def test_a_failure_while_deciding_refuses_and_is_reported_once(endpoint, caplog):
    def unreadable_policy():
        raise OSError("policy file vanished")

    seen: list[Decision] = []
    admission = Admission(policy=unreadable_policy, cluster=NO_CLUSTER, observers=[seen.append])
    with caplog.at_level(logging.ERROR, logger="webhook.admission"):
        response = getattr(admission, endpoint)(request())["response"]
    assert response["allowed"] is False
    assert "OSError: policy file vanished" in response["status"]["message"]
    (decision,) = seen
    assert (decision.endpoint, decision.allowed, decision.reason, decision.verdict) == (endpoint, False, "error", None)
    assert decision.seconds > 0
