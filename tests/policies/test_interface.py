"""The values rules and the engine exchange: how actions cap each other, and what a context
shares (nothing between requests, its derived values within one)."""
import dataclasses

import pytest

from policies.interface import Action, RuleContext, UserInfo
from testing.builders import context, mpijob


@pytest.mark.parametrize(("action", "ceiling", "enforced"), [
    (Action.DENY, Action.DENY, Action.DENY), (Action.DENY, Action.WARN, Action.WARN),
    (Action.DENY, Action.AUDIT, Action.AUDIT), (Action.WARN, Action.DENY, Action.WARN),
    (Action.WARN, Action.WARN, Action.WARN), (Action.WARN, Action.AUDIT, Action.AUDIT),
    (Action.AUDIT, Action.DENY, Action.AUDIT), (Action.AUDIT, Action.WARN, Action.AUDIT),
    (Action.AUDIT, Action.AUDIT, Action.AUDIT),
])
def test_a_finding_enforced_at_the_milder_of_action_and_ceiling(action, ceiling, enforced):
    assert action.capped_by(ceiling) is enforced


def test_derived_values_are_computed_once_per_context_and_not_copied_with_another_job():
    ctx = context(mpijob(workers=2))
    calls = []

    def workers():
        calls.append(1)
        return ctx.job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]

    assert (ctx.derived("workers", workers), ctx.derived("workers", workers), len(calls)) == (2, 2, 1)
    other = dataclasses.replace(ctx, job=mpijob(workers=5))
    assert other.derived("workers", lambda: other.job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]) == 5
    assert ctx.derived("workers", workers) == 2


def test_contexts_without_a_user_do_not_share_one():
    first, second = context(mpijob()), context(mpijob())
    assert first.user == second.user == UserInfo(username="", uid="", groups=(), extra={})
    assert first.user is not second.user and first.user.extra is not second.user.extra


def test_a_context_takes_no_field_it_does_not_declare():
    ctx = context(mpijob())
    with pytest.raises(AttributeError):
        ctx.jobs = {}  # type: ignore[attr-defined]
    assert "_derived" not in {f.name for f in dataclasses.fields(RuleContext) if f.init}
