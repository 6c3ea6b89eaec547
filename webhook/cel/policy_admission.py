"""What the API server answers for a request from ValidatingAdmissionPolicies and their
bindings: which policies match, which bindings select the namespace, each validation's
verdict and message, and the binding's ``validationActions``.

Modelled on the API server's admission plugin for the parts the exported policies use:
``matchConstraints.resourceRules`` (group, resource, operation), a binding's
``matchResources.namespaceSelector``, lazy ``variables``, ``validations`` with
``messageExpression``, and ``failurePolicy`` for evaluation errors. Each (policy, binding,
param) evaluation has its own cost meter, as the API server gives each its own budget.

Params (``spec.paramKind`` and the binding's ``paramRef``): the objects of the param kind, those
of ``paramRef.namespace`` or, for a namespaced kind with no namespace given, of the request's
namespace; chosen by ``name`` or by label ``selector`` (``{}``: all of them). Each is evaluated on
its own and the answers are ANDed (every failure of every param counts); none found:
``parameterNotFoundAction`` (``Allow``: nothing to judge; ``Deny``: the policy's
``failurePolicy`` decides, as for an error).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from webhook.cel import cel_runtime as evaluator
from webhook.cel import cel_type_check as type_check

NAME_LABEL = "kubernetes.io/metadata.name"
# k8s.io/apiserver/pkg/apis/cel: PerCallLimit and RuntimeCELCostBudget.
PER_EXPRESSION_LIMIT = 1_000_000
PER_EVALUATION_BUDGET = 10_000_000
RULE_LABEL = "mpijob-webhook.kubeflow.org/rule"


@dataclass(frozen=True)
class Answer:
    """One failed validation (or failed evaluation) of one (policy, binding)."""

    policy: str
    binding: str
    rule: str
    actions: tuple[str, ...]  # Deny, Warn, Audit
    message: str
    reason: str = "Invalid"
    error: bool = False  # the evaluation failed: failurePolicy decided


@dataclass
class Review:
    answers: list[Answer] = field(default_factory=list)
    meters: dict[str, evaluator.Meter] = field(default_factory=dict)  # "policy/binding" → cost

    def rules(self, action: str) -> set[str]:
        return {a.rule for a in self.answers if action in a.actions}

    @property
    def allowed(self) -> bool:
        return not any("Deny" in a.actions for a in self.answers)

    def messages(self, action: str) -> list[str]:
        return [a.message for a in self.answers if action in a.actions]


@dataclass(frozen=True)
class Request:
    obj: Mapping[str, Any]
    namespace: str
    old: Mapping[str, Any] | None = None
    operation: str = "CREATE"
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    group: str = "kubeflow.org"
    version: str = "v2beta1"
    resource: str = "mpijobs"
    username: str = "check"
    # The objects a policy's paramKind may name (runtimes for the TrainJob policies), and which
    # of their kinds are namespaced.
    params: Sequence[Mapping[str, Any]] = ()
    namespaced_param_kinds: frozenset[str] = frozenset()

    @property
    def labels(self) -> dict[str, str]:
        return {**self.namespace_labels, NAME_LABEL: self.namespace}


class PolicyRefused(ValueError):
    """A policy the API server would refuse to create: an expression that does not compile in
    its CEL environment (``cel_type_check``). It never answers a request, so it has no verdict."""

    def __init__(self, name: str, problems: Sequence[str]) -> None:
        super().__init__(f"the API server would refuse ValidatingAdmissionPolicy {name!r}: " + "; ".join(problems))
        self.problems = list(problems)


def review(objects: Iterable[Mapping[str, Any]], request: Request) -> Review:
    """The API server's answers; raises PolicyRefused for a policy it would not have created."""
    objects = list(objects)
    policies = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "ValidatingAdmissionPolicy"}
    for name, created in policies.items():
        problems = _compile_problems(_expressions(created))
        if problems:
            raise PolicyRefused(name, problems)
    bindings = [o for o in objects if o.get("kind") == "ValidatingAdmissionPolicyBinding"]
    result = Review()
    context = _context(request)
    for binding in bindings:
        policy = policies.get(binding["spec"]["policyName"])
        if policy is None or not _policy_matches(policy, request) or not _binding_matches(binding, request):
            continue
        key = f"{policy['metadata']['name']}/{binding['metadata']['name']}"
        if "paramKind" not in policy["spec"]:
            meter = evaluator.Meter()
            result.meters[key] = meter
            result.answers += _evaluate(policy, binding, context, meter)
            continue
        found = _params(policy, binding, request)
        if not found:
            result.answers += _not_found(policy, binding)
        for param in found:
            meter = evaluator.Meter()
            result.meters[f"{key}/{_param_name(param)}"] = meter
            result.answers += _evaluate(policy, binding, {**context, "params": evaluator.to_cel(param)}, meter)
    return result


Expressions = tuple[tuple[tuple[str, str], ...], tuple[tuple[tuple[str, str], ...], ...]]


def _expressions(policy: Mapping[str, Any]) -> Expressions:
    """What the type check reads of a policy, hashable: compiled once per distinct policy."""
    spec = policy.get("spec", {})
    variables = tuple((v["name"], v["expression"]) for v in spec.get("variables", ()))
    sections = tuple(tuple((key, str(item[key])) for key in ("expression", "messageExpression", "valueExpression")
                           if key in item)
                     for section in ("matchConditions", "validations", "auditAnnotations")
                     for item in spec.get(section, ()))
    return variables, sections


@lru_cache(maxsize=256)
def _compile_problems(expressions: Expressions) -> list[str]:
    variables, items = expressions
    return type_check.compile_problems({"spec": {
        "variables": [{"name": n, "expression": e} for n, e in variables],
        "validations": [dict(item) for item in items]}})


def _param_name(param: Mapping[str, Any]) -> str:
    meta = param.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/")


def _params(policy: Mapping[str, Any], binding: Mapping[str, Any], request: Request) -> list[Mapping[str, Any]]:
    """The param objects the binding's paramRef selects for this request."""
    kind = policy["spec"]["paramKind"]
    ref = binding["spec"].get("paramRef") or {}
    namespaced = kind["kind"] in request.namespaced_param_kinds
    namespace = (ref.get("namespace") or request.namespace) if namespaced else ""
    found = []
    for param in request.params:
        meta = param.get("metadata") or {}
        if (param.get("apiVersion"), param.get("kind")) != (kind["apiVersion"], kind["kind"]):
            continue
        if (meta.get("namespace") or "") != namespace:
            continue
        if "name" in ref and meta.get("name") != ref["name"]:
            continue
        if "selector" in ref and not selector_matches(ref["selector"], meta.get("labels") or {}):
            continue
        found.append(param)
    return found


def _not_found(policy: Mapping[str, Any], binding: Mapping[str, Any]) -> list[Answer]:
    ref = binding["spec"].get("paramRef") or {}
    if ref.get("parameterNotFoundAction") != "Deny" or policy["spec"].get("failurePolicy", "Fail") != "Fail":
        return []
    name, binding_name = policy["metadata"]["name"], binding["metadata"]["name"]
    rule = policy["metadata"].get("labels", {}).get(RULE_LABEL, name)
    return [Answer(name, binding_name, rule, tuple(binding["spec"]["validationActions"]),
                   "no params found for policy binding with `Deny` parameterNotFoundAction", "InternalError",
                   error=True)]


def _context(request: Request) -> dict[str, Any]:
    name = (request.obj.get("metadata") or {}).get("name") or ""
    return {
        "object": evaluator.to_cel(request.obj),
        "oldObject": evaluator.to_cel(request.old) if request.old is not None else None,
        "request": evaluator.to_cel({
            "operation": request.operation, "namespace": request.namespace, "name": name,
            "kind": {"group": request.group, "version": request.version, "kind": request.obj.get("kind") or ""},
            "resource": {"group": request.group, "version": request.version, "resource": request.resource},
            "userInfo": {"username": request.username},
        }),
        "namespaceObject": evaluator.to_cel({"metadata": {"name": request.namespace, "labels": request.labels}}),
        "params": None,
    }


def _policy_matches(policy: Mapping[str, Any], request: Request) -> bool:
    rules = policy["spec"].get("matchConstraints", {}).get("resourceRules", [])
    return any(_listed(rule.get("apiGroups"), request.group) and _listed(rule.get("resources"), request.resource)
               and _listed(rule.get("operations"), request.operation) for rule in rules)


def _listed(values: Sequence[str] | None, value: str) -> bool:
    return bool(values) and ("*" in values or value in values)  # type: ignore[operator]


def _binding_matches(binding: Mapping[str, Any], request: Request) -> bool:
    selector = binding["spec"].get("matchResources", {}).get("namespaceSelector")
    return selector is None or selector_matches(selector, request.labels)


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or ():
        key, operator, values = requirement["key"], requirement["operator"], requirement.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _evaluate(policy: Mapping[str, Any], binding: Mapping[str, Any], context: Mapping[str, Any],
              meter: evaluator.Meter) -> list[Answer]:
    spec = policy["spec"]
    name, binding_name = policy["metadata"]["name"], binding["metadata"]["name"]
    rule = policy["metadata"].get("labels", {}).get(RULE_LABEL, name)
    actions = tuple(binding["spec"]["validationActions"])
    declared = {v["name"]: v["expression"] for v in spec.get("variables", [])}
    variables = evaluator.lazy_variables(declared, context, meter)
    scope = {**context, "variables": variables}
    answers = []
    for validation in spec.get("validations", []):
        verdict = evaluator.evaluate(validation["expression"], scope, meter)
        if not evaluator.is_bool(verdict):
            if spec.get("failurePolicy", "Fail") == "Fail":
                answers.append(Answer(name, binding_name, rule, actions,
                                      f"ValidatingAdmissionPolicy '{name}' with binding '{binding_name}' failed to "
                                      f"evaluate: {verdict}", "InternalError", error=True))
            continue
        if verdict:
            continue
        message = validation.get("message") or f"failed expression: {validation['expression']}"
        if "messageExpression" in validation:
            written = evaluator.evaluate(validation["messageExpression"], scope, meter)
            if isinstance(written, str) and written.strip() and not evaluator.is_error(written):
                message = str(written)
        answers.append(Answer(name, binding_name, rule, actions, message, validation.get("reason", "Invalid")))
    if meter.total > PER_EVALUATION_BUDGET or any(c > PER_EXPRESSION_LIMIT for c in meter.per_expression.values()):
        answers.append(Answer(name, binding_name, rule, actions,
                              f"ValidatingAdmissionPolicy '{name}' with binding '{binding_name}' exceeded the CEL cost "
                              f"budget (estimated {meter.total})", "InternalError", error=True))
    return answers
