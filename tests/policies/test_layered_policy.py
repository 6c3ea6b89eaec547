"""Which settings apply in which namespace: the documented precedence, layer by layer."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from policies.interface import Action
from policies.config.reader import parse_policy
from policies.config.layered_policy import NAMESPACES_REMEMBERED, Override, Policy, RulePatch, SettingsPatch
from policies.kube.label_selectors import LabelSelector, Requirement
from policies.config.rule_settings import RuleConfig
from policies.registry import default_settings

POLICY = parse_policy("""
rules:
  worker-count: {action: deny, params: {min: 2, max: 64}}
  image-reference: warn
overrides:
  - name: research
    namespaceSelector: {matchLabels: {team: research}}
    rules:
      worker-count: {params: {max: 100}}
      image-reference: audit
  - name: gpu
    namespaceSelector:
      matchExpressions: [{key: accelerator, operator: In, values: [a100, h100]}]
    rules:
      worker-count: {action: warn, params: {max: 128}}
  - name: ci
    namespaces: [mpi-ci, "ci-*"]
    rules:
      worker-count: {params: {min: 1}}
  - name: ci-strict
    namespaces: [ci-strict]
    rules:
      worker-count: {action: deny}
  - name: sandboxes
    namespaceSelector: {matchLabels: {environment: sandbox}}
    exempt: true
""", own_namespace="mpijob-webhook")


def worker_count(namespace: str, **labels: str) -> tuple[Action, int, int]:
    settings = POLICY.settings_for(namespace, labels)
    assert settings is not None
    rule = settings.rules["worker-count"]
    return rule.action, rule.params.min, rule.params.max


@pytest.mark.parametrize(("namespace", "labels", "expected"), [
    ("team-a", {}, (Action.DENY, 2, 64)),  # cluster-wide over the built-in 2..100
    ("team-r", {"team": "research"}, (Action.DENY, 2, 100)),  # one selector: only max changes
    ("team-g", {"team": "research", "accelerator": "h100"}, (Action.WARN, 2, 128)),  # later selector wins
    ("mpi-ci", {"team": "research"}, (Action.DENY, 1, 100)),  # name override over the selector's max
    ("ci-nightly", {}, (Action.DENY, 1, 64)),  # name pattern
    ("ci-strict", {"accelerator": "a100"}, (Action.DENY, 1, 128)),  # both name overrides, in file order, over the selector
], ids=["cluster-wide", "selector", "two-selectors", "name-over-selector", "name-prefix", "names-in-order"])
def test_precedence_defaults_cluster_wide_selectors_names(namespace, labels, expected):
    assert worker_count(namespace, **labels) == expected


def test_other_rules_keep_the_cluster_wide_setting_unless_an_override_names_them():
    assert POLICY.settings_for("team-a").rules["image-reference"].action is Action.WARN
    assert POLICY.settings_for("team-r", {"team": "research"}).rules["image-reference"].action is Action.AUDIT
    assert POLICY.settings_for("team-r", {"team": "research"}).rules["slots-per-worker"].params.max == 8


def test_applicable_overrides_are_listed_weakest_first():
    names = [o.name for o in POLICY.applicable_overrides("ci-strict", {"team": "research", "accelerator": "a100"})]
    assert names == ["research", "gpu", "ci", "ci-strict"]


@pytest.mark.parametrize(("namespace", "labels"), [
    ("kube-system", {}),
    ("mpijob-webhook", {}),
    ("mpi-ci", {"environment": "sandbox"}),  # an exempting selector beats a name override
    ("play", {"environment": "sandbox", "team": "research"}),
])
def test_exempt_wins_over_everything(namespace, labels):
    assert POLICY.settings_for(namespace, labels) is None
    assert POLICY.is_exempt(namespace, labels)


def test_the_namespace_name_label_is_always_known():
    policy = parse_policy("overrides:\n- namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: team-x}}\n"
                          "  rules: {worker-count: audit}\n")
    assert policy.settings_for("team-x").rules["worker-count"].action is Action.AUDIT
    assert policy.settings_for("team-y").rules["worker-count"].action is Action.DENY


@pytest.mark.parametrize(("operator", "values", "labels", "matches"), [
    ("In", {"a"}, {"k": "a"}, True),
    ("In", {"a"}, {"k": "b"}, False),
    ("In", {"a"}, {}, False),
    ("NotIn", {"a"}, {"k": "b"}, True),
    ("NotIn", {"a"}, {}, True),  # as in Kubernetes: no label is "not in"
    ("NotIn", {"a"}, {"k": "a"}, False),
    ("Exists", set(), {"k": ""}, True),
    ("Exists", set(), {}, False),
    ("DoesNotExist", set(), {}, True),
    ("DoesNotExist", set(), {"k": "a"}, False),
])
def test_match_expressions_follow_kubernetes(operator, values, labels, matches):
    assert Requirement("k", operator, frozenset(values)).matches(labels) is matches


def test_an_empty_selector_matches_every_namespace_and_all_requirements_must_hold():
    assert LabelSelector().matches({})
    both = LabelSelector((("a", "1"),), (Requirement("b", "Exists"),))
    assert both.matches({"a": "1", "b": "x"})
    assert not both.matches({"a": "1"})
    assert not both.matches({"a": "2", "b": "x"})


def test_settings_are_resolved_once_per_set_of_matching_overrides():
    first = POLICY.settings_for("team-r", {"team": "research"})
    assert POLICY.settings_for("other-r", {"team": "research"}) is first


def test_a_namespace_answered_before_follows_its_labels_when_they_change():
    assert worker_count("relabelled", team="research") == (Action.DENY, 2, 100)
    assert worker_count("relabelled", team="research", accelerator="a100") == (Action.WARN, 2, 128)
    assert POLICY.settings_for("relabelled", {"environment": "sandbox"}) is None
    assert worker_count("relabelled") == (Action.DENY, 2, 64)
    assert worker_count("relabelled", team="research") == (Action.DENY, 2, 100)


def test_label_values_that_are_not_strings_are_still_answered():
    assert POLICY.settings_for("odd", {"team": ["research"]}).rules["worker-count"].params.max == 64  # type: ignore[dict-item]
    assert POLICY.settings_for("odd", {"environment": "sandbox", "x": {}}) is None  # type: ignore[dict-item]


def test_answers_beyond_the_remembered_namespaces_stay_right():
    policy = parse_policy("overrides:\n- namespaces: [\"even-*\"]\n  rules: {worker-count: audit}\n")
    for round_ in range(2):
        for i in range(NAMESPACES_REMEMBERED + 10):
            expected = Action.AUDIT if i % 2 == 0 else Action.DENY
            kind = "even" if i % 2 == 0 else "odd"
            assert policy.settings_for(f"{kind}-{i}").rules["worker-count"].action is expected, (round_, i)


def test_with_cluster_unavailable_sets_one_answer_everywhere():
    policy = parse_policy("clusterUnavailable: deny\noverrides:\n- namespaces: [a]\n  clusterUnavailable: warn\n")
    assert policy.settings_for("a").cluster_unavailable is Action.WARN
    audited = policy.with_cluster_unavailable(Action.AUDIT)
    assert audited.settings_for("a").cluster_unavailable is Action.AUDIT
    assert audited.settings_for("b").cluster_unavailable is Action.AUDIT


@dataclass(frozen=True)
class RangeParams:
    min: int = 1
    max: int = 10

    def __post_init__(self) -> None:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")


class Ranged:
    id = "ranged"
    Params = RangeParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx):
        return ()


def test_overrides_that_clash_only_together_leave_the_earlier_layer_in_force_and_say_so(caplog):
    raises_min = Override("raise-min", selector=LabelSelector((("t", "x"),)),
                          patch=SettingsPatch(rules={"ranged": RulePatch(params={"min": 8})}))
    lowers_max = Override("lower-max", namespaces=frozenset({"n"}),
                          patch=SettingsPatch(rules={"ranged": RulePatch(action=Action.WARN, params={"max": 5})}))
    policy = Policy(settings=default_settings(rules=(Ranged(),), mutations=()), overrides=(raises_min, lowers_max))
    with caplog.at_level(logging.ERROR, logger="policies.config.layered_policy"):
        settings = policy.settings_for("n", {"t": "x"})
    assert settings is not None
    assert settings.rules["ranged"] == RuleConfig(Action.DENY, RangeParams(min=8, max=10))
    assert caplog.messages == ["policy override lower-max was not applied in combination with raise-min: "
                               "min 8 is above max 5"]
    assert policy.settings_for("n").rules["ranged"] == RuleConfig(Action.WARN, RangeParams(min=1, max=5))
