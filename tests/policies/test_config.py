"""The policy file: every rule and mutation of the registry configurable, every mistake named
with its field path, line and a "did you mean"."""
from __future__ import annotations

import dataclasses
import enum
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.interface import Action, Mutated, NoParams
from policies.config import PolicyError
from policies.config.parameters import yaml_name
from policies.config.json_schema import defaults_document, json_schema
from policies.config.reader import parse_policy, policy_from_document
from policies.config.yaml_reading import MAX_POLICY_BYTES
from policies.registry import MUTATIONS, RULES, default_settings

ROOT = Path(__file__).resolve().parents[2]


def problems(text: str, **kwargs) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, **kwargs)
    return [str(p) for p in caught.value.problems]


# --- a rule and a mutation with every kind of parameter, independent of the real registry ----
class Colour(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Limits:
    cpu: int = 1
    memory: str = "1Gi"


@dataclass(frozen=True)
class EveryTypeParams:
    count: int = 1
    ratio: float = 0.5
    strict: bool = False
    registry: str = "quay.io"
    colour: Colour = Colour.RED
    mode: Literal["fast", "slow"] = "fast"
    ceiling: int | None = None
    names: tuple[str, ...] = ("a",)
    tags: frozenset[str] = frozenset()
    per_namespace: Mapping[str, int] = field(default_factory=dict)
    limits: Limits = Limits()
    min_gpus: int = 0
    max_gpus: int = 8


class EveryType:
    """A rule with a parameter of every supported type."""

    id = "every-type"
    Params = EveryTypeParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx):
        return ()


@dataclass(frozen=True)
class SelfCheckingParams:
    account: str = "runner"

    def __post_init__(self) -> None:
        if not self.account.islower():
            raise ValueError(f"account {self.account!r} must be lowercase")


class SelfChecking:
    id = "self-checking"
    Params = SelfCheckingParams
    enabled_by_default = False

    def apply(self, job, ctx):
        return Mutated()


class Plain:
    id = "plain"
    Params = NoParams
    default_action = Action.WARN
    needs_cluster = True

    def check(self, ctx):
        return ()


FAKE = {"rules": (EveryType(), Plain()), "mutations": (SelfChecking(),)}


# --- defaults -------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "null\n", "{}\n"], ids=repr)
def test_no_settings_are_the_built_in_defaults(text):
    policy = parse_policy(text, own_namespace="ops")
    assert policy.settings == default_settings()
    assert policy.exempt_namespaces == {"kube-system", "ops"}
    assert policy.overrides == ()


def test_the_defaults_document_covers_every_registered_rule_and_mutation_and_reads_back_as_the_defaults():
    document = defaults_document()
    assert list(document["rules"]) == [r.id for r in RULES]
    assert list(document["mutations"]) == [m.id for m in MUTATIONS]
    for rule in RULES:
        assert set(document["rules"][rule.id]["params"]) == {yaml_name(f.name) for f in dataclasses.fields(rule.Params)}
    policy = parse_policy(yaml.safe_dump(document, sort_keys=False))
    assert policy.settings == default_settings()


def test_the_example_policy_is_valid_and_matches_the_schema():
    text = (ROOT / "examples" / "policy.yaml").read_text()
    policy = parse_policy(text, source="examples/policy.yaml")
    assert policy.overrides
    jsonschema.validate(yaml.safe_load(text), json_schema())


# --- reading values -------------------------------------------------------------------------
def test_every_parameter_type_is_read_from_camel_case_keys():
    policy = parse_policy("""
rules:
  every-type:
    action: warn
    params:
      count: 3
      ratio: 2
      strict: true
      registry: registry.example.com
      colour: blue
      mode: slow
      ceiling: 7
      names: [x, y]
      tags: [t1, t2, t1]
      perNamespace: {team-a: 4}
      limits: {cpu: 2}
      maxGpus: 16
""", **FAKE)
    rule = policy.settings.rules["every-type"]
    assert rule.action is Action.WARN
    assert rule.params == EveryTypeParams(
        count=3, ratio=2.0, strict=True, registry="registry.example.com", colour=Colour.BLUE, mode="slow",
        ceiling=7, names=("x", "y"), tags=frozenset({"t1", "t2"}), per_namespace={"team-a": 4},
        limits=Limits(cpu=2), max_gpus=16)
    assert isinstance(rule.params.ratio, float)


def test_shorthands_set_only_the_action_or_the_switch():
    policy = parse_policy("rules: {every-type: audit, plain: deny}\nmutations: {self-checking: true}\n", **FAKE)
    assert policy.settings.rules["every-type"].action is Action.AUDIT
    assert policy.settings.rules["every-type"].params == EveryTypeParams()
    assert policy.settings.rules["plain"].action is Action.DENY
    assert policy.settings.mutations["self-checking"].enabled is True


def test_an_omitted_optional_stays_at_its_default_and_null_sets_none():
    policy = parse_policy("rules: {every-type: {params: {ceiling: null}}}", **FAKE)
    assert policy.settings.rules["every-type"].params.ceiling is None


# --- mistakes: path, line, hint -------------------------------------------------------------
def test_a_typo_in_a_rule_id_is_refused_with_a_hint():
    assert problems("rules:\n  worker-cont:\n    action: warn\n") == [
        "line 2: rules.worker-cont: unknown rule id 'worker-cont'; did you mean worker-count? "
        f"(known rules: {', '.join(r.id for r in RULES)})"
    ]


def test_a_typo_in_a_mutation_id_is_refused_with_a_hint():
    [problem] = problems("mutations:\n  istio-sidecar: false\n")
    assert problem.startswith("line 2: mutations.istio-sidecar: unknown mutation id 'istio-sidecar'; "
                              "did you mean istio-sidecar-off?")


def test_a_rule_id_typo_inside_an_override_names_the_override():
    [problem] = problems("overrides:\n- namespaces: [a]\n  rules:\n    slot-per-worker: warn\n")
    assert problem.startswith("line 4: overrides[0].rules.slot-per-worker: unknown rule id 'slot-per-worker'; "
                              "did you mean slots-per-worker?")


def test_snake_case_parameters_are_pointed_to_their_camel_case_names():
    [problem] = problems("rules:\n  every-type:\n    params:\n      max_gpus: 4\n", **FAKE)
    assert problem.startswith("line 4: rules.every-type.params.max_gpus: unknown parameter 'max_gpus'; "
                              "did you mean maxGpus? (parameters: count, ratio, strict,")


@pytest.mark.parametrize(("value", "message"), [
    ("count: '3'", "line 4: rules.every-type.params.count: must be an integer, not the string '3'"),
    ("count: true", "line 4: rules.every-type.params.count: must be an integer, not the boolean true"),
    ("ratio: fast", "line 4: rules.every-type.params.ratio: must be a number, not the string 'fast'"),
    ("registry: 5", 'line 4: rules.every-type.params.registry: must be a string, not the number 5; quote it: "5"'),
    ("colour: green", "line 4: rules.every-type.params.colour: unsupported value 'green': must be one of red, blue"),
    ("colour: bleu", "line 4: rules.every-type.params.colour: unsupported value 'bleu': must be one of red, blue; "
                     "did you mean blue?"),
    ("mode: slo", "line 4: rules.every-type.params.mode: unsupported value 'slo': must be one of fast, slow; "
                  "did you mean slow?"),
    ("names: x", "line 4: rules.every-type.params.names: must be a list, not the string 'x'"),
    ("names: [x, 3]", "line 4: rules.every-type.params.names[1]: must be a string, not the number 3; quote it: \"3\""),
    ("perNamespace: {a: x}", "line 4: rules.every-type.params.perNamespace.a: must be an integer, not the string 'x'"),
    ("limits: {cpus: 2}", "line 4: rules.every-type.params.limits.cpus: unknown parameter 'cpus'; did you mean cpu? "
                          "(parameters: cpu, memory)"),
    ("ceiling: x", "line 4: rules.every-type.params.ceiling: must be an integer, not the string 'x'"),
    ("minGpus: 9", "line 3: rules.every-type.params: minGpus (9) is above maxGpus (8): nothing could pass; "
                   "lower minGpus or raise maxGpus"),
], ids=lambda v: None if v.startswith("line") else v)
def test_wrong_parameter_values_are_refused_with_their_path(value, message):
    [problem] = problems(f"rules:\n  every-type:\n    params:\n      {value}\n", **FAKE)
    assert problem == message


def test_a_params_own_check_is_reported_at_the_params_path():
    assert problems("mutations:\n  self-checking:\n    params: {account: Runner}\n", **FAKE) == [
        "line 3: mutations.self-checking.params: account 'Runner' must be lowercase"]


def test_a_real_parameter_range_is_checked_against_the_cluster_wide_value():
    assert problems("rules:\n  worker-count:\n    params: {max: 64}\noverrides:\n"
                    "- namespaces: [big]\n  rules: {worker-count: {params: {min: 65}}}\n") == [
        "line 6: overrides[0].rules.worker-count.params: min (65) is above max (64): nothing could pass; "
        "lower min or raise max"]


@pytest.mark.parametrize(("text", "message"), [
    ("rule:\n  plain: warn\n", "line 1: rule: unknown field 'rule' at the top level; did you mean rules? "
                              "(fields: apiVersion, kind, clusterUnavailable, exemptNamespaces, kueueUsernames, rules, "
                              "mutations, overrides)"),
    ("rules:\n  plain: block\n", "line 2: rules.plain.action: unsupported value 'block': must be one of deny, warn, audit"),
    ("rules:\n  plain: {action: warn, param: {}}\n", "line 2: rules.plain.param: unknown field 'param' at rules.plain; "
                                                     "did you mean params? (fields: action, params)"),
    ("rules: [plain]\n", "line 1: rules: must be a mapping of rule id to its settings, not a list"),
    ("rules:\n  plain: 3\n", "line 2: rules.plain: must be an action (deny, warn, audit) or a mapping with action and params"),
    ("mutations:\n  self-checking: {enabled: 'no'}\n",
     "line 2: mutations.self-checking.enabled: must be true or false, not the string 'no'"),
    ("clusterUnavailable: audit\n", "line 1: clusterUnavailable: unsupported value 'audit': must be one of warn, deny"),
    ("apiVersion: v1\n", "line 1: apiVersion: unsupported value 'v1': must be mpijob-webhook/v1"),
    ("kind: ConfigMap\n", "line 1: kind: unsupported value 'ConfigMap': must be Policy"),
    ("exemptNamespaces: kube-system\n", "line 1: exemptNamespaces: must be a list of namespace names "
                                        "(a trailing * matches by prefix: \"openshift-*\")"),
    ("exemptNamespaces: [Kube_System]\n", "line 1: exemptNamespaces[0]: 'Kube_System' is not a namespace name "
                                          "(lowercase letters, digits and '-', at most 63 characters; "
                                          "a trailing * matches by prefix)"),
    ("kueueUsernames: system:serviceaccount:kueue-system:kueue-controller-manager\n",
     "line 1: kueueUsernames: must be a list of usernames as the API server reports them in userInfo "
     '(a ServiceAccount: "system:serviceaccount:<namespace>:<name>")'),
    ("kueueUsernames: ['']\n", "line 1: kueueUsernames: must be a list of usernames as the API server reports them "
                               'in userInfo (a ServiceAccount: "system:serviceaccount:<namespace>:<name>")'),
    ("rules: {plain: warn}\nrules: {plain: deny}\n", "line 2: rules: duplicate key: each key may appear once"),
    ("rules: {plain: warn\n", "line 2: (document): not valid YAML: while parsing a flow mapping expected ',' or '}', "
                              "but got '<stream end>'"),
    ("a: 1\n---\nb: 2\n", "line 2: (document): not valid YAML: expected a single document in the stream "
                          "but found another document"),
    ("- 1\n", "(document): must be a mapping of policy settings, not a list"),
], ids=lambda v: v.split("\n")[0][:40])
def test_document_mistakes_are_refused_with_path_and_line(text, message):
    assert problems(text, **FAKE) == [message]


@pytest.mark.parametrize(("override", "message"), [
    ("- name: x\n  rules: {plain: warn}\n",
     "line 2: overrides[0]: must have exactly one of namespaces (by name) or namespaceSelector (by label)"),
    ("- namespaces: [a]\n  namespaceSelector: {}\n",
     "line 2: overrides[0]: must have exactly one of namespaces (by name) or namespaceSelector (by label)"),
    ("- namespaces: []\n", "line 2: overrides[0].namespaces: must name at least one namespace"),
    ("- namespaces: [a]\n  exempt: maybe\n", "line 3: overrides[0].exempt: must be true or false, not the string 'maybe'"),
    ("- namespaceSelector: {matchLabels: {team: 1}}\n",
     "line 2: overrides[0].namespaceSelector.matchLabels.team: label values are strings: quote it (\"1\")"),
    ("- namespaceSelector: {matchLabel: {team: a}}\n",
     "line 2: overrides[0].namespaceSelector.matchLabel: unknown field 'matchLabel' at overrides[0].namespaceSelector; "
     "did you mean matchLabels? (fields: matchLabels, matchExpressions)"),
    ("- namespaceSelector:\n    matchExpressions: [{key: env, operator: In}]\n",
     "line 3: overrides[0].namespaceSelector.matchExpressions[0].values: In needs a non-empty list of string values"),
    ("- namespaceSelector:\n    matchExpressions: [{key: env, operator: Exists, values: [a]}]\n",
     "line 3: overrides[0].namespaceSelector.matchExpressions[0].values: Exists takes no values"),
    ("- namespaceSelector:\n    matchExpressions: [{key: env, operator: in, values: [a]}]\n",
     "line 3: overrides[0].namespaceSelector.matchExpressions[0].operator: unsupported value 'in': must be one of "
     "In, NotIn, Exists, DoesNotExist; did you mean In?"),
    ("- namespaceSelector: {matchLabels: {'bad key!': a}}\n",
     "line 2: overrides[0].namespaceSelector.matchLabels[bad key!]: 'bad key!' is not a valid label key"),
    ("- namespaces: [a]\n  clusterUnavailable: ignore\n",
     "line 3: overrides[0].clusterUnavailable: unsupported value 'ignore': must be one of warn, deny"),
    ("- namespaces: [a]\n  namespace: b\n",
     "line 3: overrides[0].namespace: unknown field 'namespace' at overrides[0]; did you mean namespaces? "
     "(fields: name, namespaces, namespaceSelector, exempt, clusterUnavailable, rules, mutations)"),
], ids=lambda v: v.split("\n")[0][:50])
def test_override_mistakes_are_refused_with_path_and_line(override, message):
    assert problems("overrides:\n" + override, **FAKE) == [message]


def test_every_problem_is_reported_at_once_in_line_order():
    found = problems("rules:\n  plain: block\n  every-type: {params: {count: x}}\nmutations: {nope: true}\n", **FAKE)
    assert [p.split(":")[0] for p in found] == ["line 2", "line 3", "line 4"]


def test_the_error_summary_names_the_file_and_counts_problems():
    with pytest.raises(PolicyError) as caught:
        parse_policy("rules: {plain: block}\nmutations: {nope: true}\n", source="/etc/policy/policy.yaml", **FAKE)
    assert str(caught.value).startswith("/etc/policy/policy.yaml is invalid (2 problems):\n  line 1: rules.plain.action:")
    assert caught.value.first_line().startswith("/etc/policy/policy.yaml: line 1: rules.plain.action: unsupported value")
    assert caught.value.first_line().endswith("(and 1 more)")


def test_a_self_referencing_alias_is_refused_not_recursed():
    [problem] = problems("a: &x [*x]\n")
    assert "nested deeper than 32 levels" in problem


def test_an_oversized_file_is_refused():
    assert problems("#" * (MAX_POLICY_BYTES + 1)) == [
        f"(document): the file is larger than {MAX_POLICY_BYTES} bytes"]


# --- exempt namespaces ----------------------------------------------------------------------
def test_exempt_namespaces_replace_the_default_but_keep_the_webhooks_own():
    policy = parse_policy("exemptNamespaces: [openshift-*, monitoring]\n", own_namespace="mpi-admission")
    assert policy.exempt_namespaces == {"openshift-*", "monitoring", "mpi-admission"}
    assert policy.settings_for("openshift-monitoring") is None
    assert policy.settings_for("mpi-admission") is None
    assert policy.settings_for("kube-system") is not None


# --- Kueue's identity -----------------------------------------------------------------------
def test_kueues_usernames_default_to_upstream_kueue_and_the_red_hat_build():
    expected = {"system:serviceaccount:kueue-system:kueue-controller-manager",
                "system:serviceaccount:openshift-kueue-operator:kueue-controller-manager"}
    assert parse_policy("").kueue_usernames == expected
    assert set(json_schema()["properties"]["kueueUsernames"]["default"]) == expected
    assert set(defaults_document()["kueueUsernames"]) == expected


def test_kueues_usernames_replace_the_default_and_an_empty_list_trusts_no_one():
    assert parse_policy("kueueUsernames: [system:serviceaccount:queues:kueue]\n").kueue_usernames == {
        "system:serviceaccount:queues:kueue"}
    assert parse_policy("kueueUsernames: []\n").kueue_usernames == frozenset()


# --- the schema -----------------------------------------------------------------------------
def test_the_schema_is_generated_from_the_registry():
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert list(schema["$defs"]["rules"]["properties"]) == [r.id for r in RULES]
    assert list(schema["$defs"]["mutations"]["properties"]) == [m.id for m in MUTATIONS]
    for rule in RULES:
        entry = schema["$defs"]["rules"]["properties"][rule.id]["oneOf"][1]["properties"]
        assert entry["action"]["default"] == rule.default_action.value
        assert set(entry["params"]["properties"]) == {yaml_name(f.name) for f in dataclasses.fields(rule.Params)}


def test_the_schema_describes_each_parameter_type():
    params = json_schema(**FAKE)["$defs"]["rules"]["properties"]["every-type"]["oneOf"][1]["properties"]["params"]
    props = params["properties"]
    assert props["count"] == {"type": "integer", "default": 1}
    assert props["ratio"] == {"type": "number", "default": 0.5}
    assert props["colour"] == {"enum": ["red", "blue"], "default": "red"}
    assert props["mode"] == {"enum": ["fast", "slow"], "default": "fast"}
    assert props["ceiling"] == {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "default": []}
    assert props["perNamespace"] == {"type": "object", "additionalProperties": {"type": "integer"}, "default": {}}
    assert props["limits"]["properties"]["memory"] == {"type": "string", "default": "1Gi"}
    assert params["additionalProperties"] is False


@pytest.mark.parametrize("document", [
    {"rules": {"worker-cont": {"action": "warn"}}},
    {"rules": {"worker-count": {"action": "block"}}},
    {"rules": {"worker-count": {"params": {"maximum": 3}}}},
    {"mutations": {"istio-sidecar": False}},
    {"overrides": [{"namespaces": ["a"], "rules": {"slot-per-worker": "warn"}}]},
    {"overrides": [{"rules": {"worker-count": "warn"}}]},
    {"clusterUnavailable": "audit"},
    {"kueueUsernames": "system:serviceaccount:kueue-system:kueue-controller-manager"},
    {"kueueUsernames": [""]},
], ids=lambda d: json.dumps(d)[:60])
def test_the_schema_rejects_what_the_loader_rejects(document):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, json_schema())
    with pytest.raises(PolicyError):
        policy_from_document(document)


@functools.cache
def registry_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json_schema())


# ~8 ms an example: schema validation of the whole document
@settings(max_examples=min(settings.default.max_examples, 200))
@given(actions=st.fixed_dictionaries({r.id: st.sampled_from(list(Action)) for r in RULES}),
       switches=st.fixed_dictionaries({m.id: st.booleans() for m in MUTATIONS}))
def test_any_choice_of_actions_and_switches_reads_back_exactly(actions, switches):
    document = {"rules": {k: v.value for k, v in actions.items()}, "mutations": switches}
    registry_validator().validate(document)
    settings = policy_from_document(document).settings
    assert {k: v.action for k, v in settings.rules.items()} == actions
    assert {k: v.enabled for k, v in settings.mutations.items()} == switches


# --- nothing crashes the loader -------------------------------------------------------------
KEYS = st.sampled_from(["rules", "mutations", "overrides", "exemptNamespaces", "clusterUnavailable", "action",
                        "params", "enabled", "namespaces", "namespaceSelector", "matchLabels", "matchExpressions",
                        "key", "operator", "values", "exempt", "name", "min", "max", "queues", "defaultQueue",
                        *[r.id for r in RULES], *[m.id for m in MUTATIONS]])
SCALARS = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | \
    st.sampled_from(["deny", "warn", "audit", "In", "Exists", "team-a", "", "x" * 70]) | st.text(max_size=8)
DOCUMENTS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    KEYS | st.text(max_size=6), inner, max_size=5), max_leaves=25)


# ~20 ms an example (generation of nested documents)
@settings(max_examples=min(settings.default.max_examples, 500))
@given(document=DOCUMENTS)
def test_any_document_is_a_policy_or_a_policy_error(document):
    try:
        policy_from_document(document)
    except PolicyError as error:
        assert error.problems
        assert all(isinstance(p.message, str) and p.message for p in error.problems)


@given(text=st.text(max_size=200))
def test_any_text_is_a_policy_or_a_policy_error(text):
    try:
        parse_policy(text)
    except PolicyError as error:
        assert error.problems
