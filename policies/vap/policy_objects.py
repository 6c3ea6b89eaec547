"""The policy file as ValidatingAdmissionPolicy objects: one policy and one binding per rule
and per action the rule has in some namespace.

A binding's ``validationActions`` is fixed, while the policy file may give a rule one action in
most namespaces and another in some: each (rule, action) pair is its own policy, whose
``variables.enforced`` is true exactly in the namespaces where the webhook gives the rule that
action (and false in exempt namespaces). Parameters are variables too, resolved per namespace
from the same layers as the webhook's (``policies.vap.namespaces``).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from policies.vap import cel_text as cel, namespaces
from policies.vap.checks import Validation
from policies.vap.policy_model import Action, Override, Policy
from policies.vap.rules import (
    gpus_per_worker_cel as gpus_per_worker,
    job_name_cel as job_name,
    launcher_cel as launcher,
    mpi_settings_cel as mpi_settings,
    replica_spec_cel as replica_spec,
    run_policy_cel as run_policy,
    slots_per_worker_cel as slots_per_worker,
    worker_count_cel as worker_count,
)
from policies.vap.shared_parts import share

API_VERSION = "admissionregistration.k8s.io/v1"
DEFAULT_PREFIX = "mpijob-webhook"
GROUP, VERSION, RESOURCE = "kubeflow.org", "v2beta1", "mpijobs"
RULE_LABEL = "mpijob-webhook.kubeflow.org/rule"
EXPORT_LABEL = "mpijob-webhook.kubeflow.org/exported-policy"
PART_OF = {"app.kubernetes.io/part-of": "mpijob-webhook"}
NAME_LABEL = "kubernetes.io/metadata.name"
# In the order the webhook runs and reports them.
EXPORTED: tuple[ModuleType, ...] = (job_name, replica_spec, launcher, worker_count, slots_per_worker, mpi_settings,
                                    run_policy, gpus_per_worker)
EXPORTED_RULES = tuple(m.RULE for m in EXPORTED)
VALIDATION_ACTIONS = {Action.DENY: "Deny", Action.WARN: "Warn", Action.AUDIT: "Audit"}


@dataclass(frozen=True)
class Target:
    """What one set of exported policies matches, and what they are handed as ``params``.

    MPIJobs need nothing but the request. A TrainJob is judged with its training runtime, which
    the API server hands in as ``params`` (``param_kind``): ``judged`` is the CEL under which a
    policy judges at all (the params are the TrainJob's own runtime, an MPI runtime), and
    ``passes`` the CEL of an UPDATE that passes whatever changed (read last, only when a check
    fails)."""

    kind: str  # the matched kind, as the policies' messages name it
    group: str
    version: str
    resource: str
    infix: str = ""  # object names: <prefix>-<infix><rule>[-<action>]
    param_kind: tuple[str, str] | None = None  # (apiVersion, kind)
    variables: tuple[tuple[str, str], ...] = ()  # (name, CEL) read by ``judged`` and the checks
    judged: str = ""
    passes: str = ""


MPIJOBS = Target("MPIJob", GROUP, VERSION, RESOURCE)


@dataclass(frozen=True)
class ExportedRule:
    rule: str
    action: Action
    policy: dict[str, Any]
    binding: dict[str, Any]


def export(policy: Policy, prefix: str = DEFAULT_PREFIX) -> list[ExportedRule]:
    exported = []
    for module in EXPORTED:
        exported += export_rule(policy, prefix, module.RULE, module.validations())
    return exported


KINDS = ("MPIJob", "TrainJob")


def objects(policy: Policy, prefix: str = DEFAULT_PREFIX, kinds: Sequence[str] = KINDS,
            trainjob_rules: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every policy, then every binding (the order ``kubectl apply`` wants them in): the MPIJob
    policies, then the TrainJob ones (``policies.vap.trainjob_objects``: ``trainjob_rules``, by
    default its ``TRAINJOB_DEFAULT_RULES``), of the ``kinds`` asked."""
    from policies.vap.trainjob_objects import TRAINJOB_DEFAULT_RULES, export_trainjobs  # they build on this module

    exported = export(policy, prefix) if "MPIJob" in kinds else []
    if "TrainJob" in kinds:
        exported += export_trainjobs(policy, prefix, TRAINJOB_DEFAULT_RULES if trainjob_rules is None else trainjob_rules)
    # Repeated and overlong CEL written once, as variables (policies.vap.shared_parts).
    policies = [{**e.policy, "spec": share(e.policy["spec"])} for e in exported]
    return policies + [e.binding for e in exported]


def export_rule(policy: Policy, prefix: str, rule: str, validations: Sequence[Validation],
                target: Target = MPIJOBS) -> list[ExportedRule]:
    """The policies and bindings of one rule for ``target``: one pair per action the rule has
    in some namespace."""
    base_action = policy.settings.action(rule)
    action_of = _override_action(rule)
    actions = namespaces.possible_values(policy, base_action, action_of)
    exported = []
    for action in actions:
        base = f"{prefix}-{target.infix}{rule}"
        name = base if len(actions) == 1 else f"{base}-{action.value}"
        enforced = f"!({namespaces.exempt(policy)})"
        if len(actions) > 1:
            chosen = namespaces.layered(policy, base_action, action_of, lambda a: cel.string(a.value))
            enforced = f"{enforced} && {chosen} == {cel.string(action.value)}"
        variables = (_namespace_variables(policy) + [("enforced", enforced)] + _param_variables(policy, rule)
                     + list(target.variables) + ([("judged", target.judged)] if target.judged else []))
        exported.append(ExportedRule(rule, action, _policy(name, prefix, rule, variables, validations, target),
                                     _binding(name, prefix, rule, action, policy, target)))
    return exported


def _override_action(rule: str) -> Callable[[Override], Action | None]:
    def action_of(override: Override) -> Action | None:
        patch = override.patch.rules.get(rule)
        return patch.action if patch is not None else None
    return action_of


def _namespace_variables(policy: Policy) -> list[tuple[str, str]]:
    return [("namespaceLabels", namespaces.LABELS)] if namespaces.reads_labels(policy) else []


def _param_variables(policy: Policy, rule: str) -> list[tuple[str, str]]:
    params = policy.settings.rules[rule].params
    found = []
    for field in dataclasses.fields(params):
        if not field.init:
            continue

        def value_of(override: Override, name: str = field.name) -> Any:
            patch = override.patch.rules.get(rule)
            return patch.params.get(name) if patch is not None else None

        expression = namespaces.layered(policy, getattr(params, field.name), value_of, _literal)
        found.append((f"param_{_camel(field.name)}", expression))
    return found


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return cel.integer(value)
    if isinstance(value, str):
        return cel.string(value)
    if isinstance(value, (tuple, list)):
        return cel.strings(value)
    if isinstance(value, (frozenset, set)):
        return cel.strings(sorted(value))
    raise TypeError(f"a parameter of type {type(value).__name__} cannot be written in CEL")


def _metadata(name: str, prefix: str, rule: str) -> dict[str, Any]:
    return {"name": name, "labels": {**PART_OF, EXPORT_LABEL: prefix, RULE_LABEL: rule}}


def _policy(name: str, prefix: str, rule: str, variables: Sequence[tuple[str, str]],
            validations: Sequence[Validation], target: Target) -> dict[str, Any]:
    declared = list(variables)
    for validation in validations:
        declared += validation.variables
    spec: dict[str, Any] = {
        # Evaluation errors refuse the request, as the webhook refuses what it cannot check.
        "failurePolicy": "Fail",
    }
    if target.param_kind is not None:
        spec["paramKind"] = {"apiVersion": target.param_kind[0], "kind": target.param_kind[1]}
    spec["matchConstraints"] = {
        # Jobs written in an older served version are converted to the matched one and checked.
        "matchPolicy": "Equivalent",
        "resourceRules": [{"apiGroups": [target.group], "apiVersions": [target.version],
                           "operations": ["CREATE", "UPDATE"], "resources": [target.resource], "scope": "Namespaced"}],
    }
    spec["variables"] = [{"name": n, "expression": e} for n, e in declared]
    spec["validations"] = [{
        "expression": _verdict(v.expression, target),
        "messageExpression": v.message,
        "message": f"[{rule}] the {target.kind} fails the {v.name} check of {rule}",
        "reason": "Invalid",
    } for v in validations]
    return {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicy", "metadata": _metadata(name, prefix, rule),
            "spec": spec}


def _verdict(expression: str, target: Target) -> str:
    parts = ["!variables.enforced"]
    if target.judged:
        parts.append("!variables.judged")
    parts.append(f"({expression})")
    if target.passes:
        parts.append(target.passes)
    return " || ".join(parts)


def _binding(name: str, prefix: str, rule: str, action: Action, policy: Policy, target: Target) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": name, "validationActions": [VALIDATION_ACTIONS[action]]}
    if target.param_kind is not None:
        # Every object of the kind (in the request's namespace, for a namespaced kind), each
        # evaluated on its own and the answers ANDed; none at all: nothing to judge.
        spec["paramRef"] = {"selector": {}, "parameterNotFoundAction": "Allow"}
    exact = sorted(n for n in policy.exempt_namespaces if not n.endswith("*"))
    if exact:
        # Not even evaluated there; name patterns and exempt overrides are in the policy's CEL.
        spec["matchResources"] = {"namespaceSelector": {"matchExpressions": [
            {"key": NAME_LABEL, "operator": "NotIn", "values": exact}]}}
    return {"apiVersion": API_VERSION, "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": _metadata(name, prefix, rule), "spec": spec}
