"""The engine's own bookkeeping: the verdict's views of its outcomes, the actions and skipped
rules worked out once per settings, and what a failing rule leaves in the verdict."""
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies import engine
from policies.interface import Action, Finding, Mutated, NoParams, Problem
from policies.cluster_view import NO_CLUSTER, StaticClusterView
from policies.engine import CLUSTER_STATE_RULE, Outcome, Verdict, evaluate, mutate
from policies.mutations.edits import set_value
from policies.registry import default_settings
from testing.builders import context, mpijob


class Speaks:
    """A rule that reports one finding on every job."""

    Params = NoParams
    default_action = Action.DENY

    def __init__(self, ident: str, *, needs_cluster: bool = False, ceiling: Action = Action.DENY) -> None:
        self.id, self.needs_cluster, self.ceiling = ident, needs_cluster, ceiling

    def check(self, ctx):
        return [Finding(self.id, "spec", f"{self.id} speaks", ceiling=self.ceiling)]


class Fails(Speaks):
    def check(self, ctx):
        raise ValueError("no")


class Labels:
    """A mutation that adds one label."""

    Params = NoParams
    enabled_by_default = True

    def __init__(self, ident: str) -> None:
        self.id = ident

    def apply(self, job, ctx):
        return Mutated(set_value(job, ("metadata", "labels"), self.id, "yes"))


def finding(rule: str, ceiling: Action = Action.DENY) -> Finding:
    return Finding(rule, "spec", f"{rule} speaks", ceiling=ceiling)


def fired(verdict: Verdict) -> list[tuple[str, Action]]:
    return [(o.finding.rule, o.action) for o in verdict.outcomes]


# --- Verdict ------------------------------------------------------------------------------

def test_verdict_sorts_its_findings_by_action_once_made():
    outcomes = (Outcome(finding("a"), Action.WARN), Outcome(finding("b"), Action.DENY),
                Outcome(finding("c"), Action.AUDIT), Outcome(finding("d"), Action.WARN))
    verdict = Verdict(outcomes, ("q",))
    assert [f.rule for f in verdict.denials] == ["b"]
    assert [f.rule for f in verdict.warnings] == ["a", "d"]
    assert [f.rule for f in verdict.audits] == ["c"]
    assert verdict.allowed is False


@pytest.mark.parametrize(("outcomes", "error", "allowed"), [
    ((), None, True),
    ((Outcome(finding("a"), Action.WARN), Outcome(finding("b"), Action.AUDIT)), None, True),
    ((Outcome(finding("a"), Action.DENY),), None, False),
    ((), "rule x failed: ValueError: no", False),
])
def test_verdict_is_allowed_without_denials_and_errors(outcomes, error, allowed):
    assert Verdict(outcomes, error=error).allowed is allowed


def test_replacing_the_outcomes_sorts_them_again_and_equality_ignores_the_views():
    denied = Verdict((Outcome(finding("a"), Action.DENY),))
    audited = dataclasses.replace(denied, outcomes=(Outcome(finding("a"), Action.AUDIT),))
    assert (audited.allowed, audited.denials, [f.rule for f in audited.audits]) == (True, (), ["a"])
    assert audited == Verdict((Outcome(finding("a"), Action.AUDIT),))
    assert repr(Verdict()) == "Verdict(outcomes=(), skipped=(), error=None)"


def test_policy_denial_is_told_by_the_problem_of_a_denial():
    quota = Finding("q", "spec", "over quota", Problem.POLICY)
    assert Verdict((Outcome(quota, Action.DENY),)).is_policy_denial
    assert not Verdict((Outcome(quota, Action.WARN), Outcome(finding("a"), Action.DENY))).is_policy_denial


# --- the rules run, with their actions -------------------------------------------------------

RULES = (Speaks("a", needs_cluster=True), Speaks("b"), Speaks("c", ceiling=Action.WARN), Speaks("d", needs_cluster=True))
SETTINGS = default_settings(rules=RULES, mutations=())


def test_actions_come_from_the_settings_of_each_request():
    lenient = SETTINGS.with_rule("b", action=Action.AUDIT)
    cluster = StaticClusterView()
    for _ in range(2):  # the second time from what was worked out the first
        assert fired(evaluate(context(mpijob(), settings=SETTINGS, cluster=cluster), RULES)) == [
            ("a", Action.DENY), ("b", Action.DENY), ("c", Action.WARN), ("d", Action.DENY)]
        assert fired(evaluate(context(mpijob(), settings=lenient, cluster=cluster), RULES)) == [
            ("a", Action.DENY), ("b", Action.AUDIT), ("c", Action.WARN), ("d", Action.DENY)]


def test_cluster_rules_are_skipped_only_while_the_cluster_is_unavailable():
    for _ in range(2):
        down = evaluate(context(mpijob(), settings=SETTINGS, cluster=NO_CLUSTER), RULES)
        assert down.skipped == ("a", "d")
        assert fired(down) == [("b", Action.DENY), ("c", Action.WARN), (CLUSTER_STATE_RULE, Action.WARN)]
        assert down.outcomes[-1].finding.message.startswith("cluster checks (a, d) were not run: ")
        up = evaluate(context(mpijob(), settings=SETTINGS, cluster=StaticClusterView()), RULES)
        assert (up.skipped, [rule for rule, _ in fired(up)]) == ((), ["a", "b", "c", "d"])


def test_a_rule_list_changed_in_place_is_read_again():
    rules = [Speaks("b")]
    assert fired(evaluate(context(mpijob(), settings=SETTINGS), rules)) == [("b", Action.DENY)]
    rules.append(Speaks("c", ceiling=Action.WARN))
    assert fired(evaluate(context(mpijob(), settings=SETTINGS), rules)) == [("b", Action.DENY), ("c", Action.WARN)]


def test_what_is_worked_out_per_settings_is_bounded():
    for index in range(100):
        settings = SETTINGS.with_rule("b", action=(Action.WARN, Action.AUDIT)[index % 2])
        verdict = evaluate(context(mpijob(), settings=settings, cluster=StaticClusterView()), RULES)
        assert fired(verdict)[1] == ("b", settings.action("b"))
    assert len(engine._rule_plans) <= 64


def test_a_failing_rule_refuses_with_the_findings_and_skipped_rules_before_it():
    rules = (Speaks("a", needs_cluster=True), Speaks("b"), Fails("x"), Speaks("d", needs_cluster=True))
    settings = default_settings(rules=rules, mutations=())
    verdict = evaluate(context(mpijob(), settings=settings, cluster=NO_CLUSTER), rules)
    assert (verdict.error, verdict.skipped, fired(verdict)) == (
        "rule x failed: ValueError: no", ("a",), [("b", Action.DENY)])
    assert verdict.allowed is False


def test_a_rule_missing_from_the_settings_is_not_looked_up_while_it_is_skipped():
    settings = default_settings(rules=RULES[1:3], mutations=())
    verdict = evaluate(context(mpijob(), settings=settings, cluster=NO_CLUSTER), RULES)
    assert verdict.skipped == ("a", "d")
    with pytest.raises(KeyError):
        evaluate(context(mpijob(), settings=settings, cluster=StaticClusterView()), RULES)


# --- mutations ------------------------------------------------------------------------------

MUTATIONS = (Labels("first"), Labels("second"))


@pytest.mark.parametrize(("disabled", "applied"), [((), ("first", "second")), (("first",), ("second",)),
                                                   (("first", "second"), ())])
def test_only_the_mutations_enabled_in_the_settings_are_applied(disabled, applied):
    settings = default_settings(rules=(), mutations=MUTATIONS)
    for ident in disabled:
        settings = settings.with_mutation(ident, enabled=False)
    for _ in range(2):
        result = mutate(context(mpijob(), settings=settings), MUTATIONS)
        assert result.applied == applied
        assert {k: v for k, v in result.job["metadata"].get("labels", {}).items() if v == "yes"} == \
            {ident: "yes" for ident in applied}


# --- the same verdict as the plain loop over the rules ---------------------------------------

class Scripted(Speaks):
    """A rule that reports the findings (or the failure) it is given."""

    def __init__(self, ident: str, needs_cluster: bool, ceilings: tuple[Action, ...], fails: bool) -> None:
        super().__init__(ident, needs_cluster=needs_cluster)
        self.ceilings, self.fails = ceilings, fails

    def check(self, ctx):
        if self.fails:
            raise ValueError(self.id)
        return (finding(self.id, ceiling) for ceiling in self.ceilings)


def reference_verdict(ctx, rules) -> Verdict:
    """Rule by rule, each action looked up as it is reached."""
    outcomes, skipped = [], []
    for rule in rules:
        if rule.needs_cluster and not ctx.cluster.available:
            skipped.append(rule.id)
            continue
        action = ctx.settings.action(rule.id)
        try:
            findings = list(rule.check(ctx))
        except Exception as exc:  # noqa: BLE001
            return Verdict(tuple(outcomes), tuple(skipped), f"rule {rule.id} failed: {type(exc).__name__}: {exc}")
        outcomes += [Outcome(f, action.capped_by(f.ceiling)) for f in findings]
    if skipped:
        outcomes.append(Outcome(engine._skipped_finding(ctx, skipped), ctx.settings.cluster_unavailable))
    return Verdict(tuple(outcomes), tuple(skipped))


ACTIONS = st.sampled_from(list(Action))
# (needs the cluster, ceilings of its findings, fails, action)
RULE_SPECS = st.lists(st.tuples(st.booleans(), st.lists(ACTIONS, max_size=2).map(tuple),
                                st.sampled_from([False, False, False, True]), ACTIONS), max_size=6)


@settings(max_examples=min(settings.default.max_examples, 200))
@given(RULE_SPECS, st.booleans(), st.booleans(), ACTIONS)
def test_the_verdict_is_the_plain_loops(specs, available, as_tuple, unavailable_action):
    rules = [Scripted(f"r{i}", cluster, ceilings, fails) for i, (cluster, ceilings, fails, _) in enumerate(specs)]
    settings_ = default_settings(rules=rules, mutations=())
    for rule, (*_, action) in zip(rules, specs):
        settings_ = settings_.with_rule(rule.id, action=action)
    settings_ = dataclasses.replace(settings_, cluster_unavailable=unavailable_action)
    cluster = StaticClusterView() if available else NO_CLUSTER
    given_rules = tuple(rules) if as_tuple else rules
    for _ in range(2):
        verdict = evaluate(context(mpijob(), settings=settings_, cluster=cluster), given_rules)
        expected = reference_verdict(context(mpijob(), settings=settings_, cluster=cluster), rules)
        assert verdict == expected
        by_action = {a: tuple(o.finding for o in expected.outcomes if o.action is a) for a in Action}
        assert (verdict.denials, verdict.warnings, verdict.audits) == \
            (by_action[Action.DENY], by_action[Action.WARN], by_action[Action.AUDIT])
        assert verdict.allowed is (expected.error is None and not by_action[Action.DENY])


def test_an_mpijob_is_not_given_the_rules_about_a_trainjobs_runtime():
    from policies import registry

    assert [r.id for r in engine.default_rules()] == [r.id for r in registry.RULES if r.id != "training-runtime"]
    assert "training-runtime" in [r.id for r in registry.TRAINJOB_RULES]
