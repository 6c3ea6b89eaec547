"""``node-fit``: some node can hold each pod of the job at all.

A pod that no node can ever hold stays Pending forever, and an MPI job needs all its pods.
A node is a candidate for a pod when its labels match the pod's ``nodeSelector`` and required
node affinity, the pod tolerates its NoSchedule/NoExecute taints, and it is schedulable; the pod
fits when the candidate's allocatable covers every resource the pod requests (with LimitRange
defaults). What other pods use right now is not considered: this is about "ever", not "now".

A warning by default (a cluster autoscaler may add a larger node); admins may make it deny.
A GPU (or other extended) resource no node advertises at all is always only a warning, naming
the resource: node groups that scale from zero advertise nothing until the first node starts.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from policies.base import Action, Finding, Problem, RuleContext
from policies.jobs import LAUNCHER, pod_spec, replica_spec
from policies.messages import fits_warning
from policies.quantities import format_quantity, is_extended
from policies.resources import PodResources, parse_resources, request_pods

Node = Mapping[str, Any]
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


# --- placement: labels, affinity, taints --------------------------------------------------

def _labels(node: Node) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def _node_name(node: Node) -> str:
    return (node.get("metadata") or {}).get("name") or ""


def _expression_matches(expression: Mapping[str, Any], value: str | None, present: bool) -> bool:
    operator = expression.get("operator")
    values = [str(v) for v in expression.get("values") or ()]
    match operator:
        case "In":
            return present and value in values
        case "NotIn":
            return not present or value not in values
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
        case "Gt" | "Lt":
            try:
                actual, bound = int(value or ""), int(values[0])
            except (ValueError, IndexError):
                return False
            return actual > bound if operator == "Gt" else actual < bound
    return False


def _term_matches(term: Mapping[str, Any], node: Node) -> bool:
    """One nodeSelectorTerm: all expressions and fields hold; an empty term matches nothing."""
    expressions = [e for e in term.get("matchExpressions") or () if isinstance(e, Mapping)]
    fields = [e for e in term.get("matchFields") or () if isinstance(e, Mapping)]
    if not expressions and not fields:
        return False
    labels = _labels(node)
    for expression in expressions:
        key = str(expression.get("key") or "")
        if not _expression_matches(expression, labels.get(key), key in labels):
            return False
    for expression in fields:  # only metadata.name is supported by the scheduler
        if expression.get("key") != "metadata.name" or \
                not _expression_matches(expression, _node_name(node), True):
            return False
    return True


def _required_terms(pod: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    affinity = ((pod.get("affinity") or {}).get("nodeAffinity") or {}) \
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(affinity, Mapping):
        return None
    return [t for t in affinity.get("nodeSelectorTerms") or () if isinstance(t, Mapping)]


def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")):
            return True
    return False


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def placement_problem(pod: Mapping[str, Any], node: Node) -> str | None:
    """Why the pod can never be placed on ``node`` whatever its size, or None."""
    selector = pod.get("nodeSelector") or {}
    labels = _labels(node)
    for key, value in selector.items():
        if labels.get(key) != value:
            return f"no label {key}={value}"
    terms = _required_terms(pod)
    if terms is not None and not any(_term_matches(t, node) for t in terms):
        return "not matched by the required node affinity"
    tolerations = [t for t in pod.get("tolerations") or () if isinstance(t, Mapping)]
    node_spec = node.get("spec") or {}
    taints = [t for t in node_spec.get("taints") or () if isinstance(t, Mapping)]
    if node_spec.get("unschedulable"):
        taints.append(_UNSCHEDULABLE_TAINT)
    for taint in taints:
        if taint.get("effect") in _BLOCKING_EFFECTS and not _tolerates(tolerations, taint):
            return f"taint {_taint_text(taint)} not tolerated"
    return None


# --- capacity -----------------------------------------------------------------------------

def _allocatable(node: Node) -> Mapping[str, Decimal]:
    values = (node.get("status") or {}).get("allocatable")
    if not isinstance(values, Mapping):
        return {}
    try:
        return _parsed_allocatable(tuple(values.items()))
    except TypeError:  # a value that cannot be a dict key cannot be a quantity either
        return parse_resources(values)


# Nodes of one instance type advertise the same allocatable map, request after request.
@lru_cache(maxsize=1024)
def _parsed_allocatable(items: tuple[tuple[str, Any], ...]) -> Mapping[str, Decimal]:
    return MappingProxyType(parse_resources(dict(items)))  # shared between requests: read-only


def _short(requests: Mapping[str, Decimal], allocatable: Mapping[str, Decimal]) -> list[str]:
    return [r for r, v in requests.items() if v > allocatable.get(r, Decimal(0))]


def _score(requests: Mapping[str, Decimal], allocatable: Mapping[str, Decimal]) -> tuple[int, Decimal]:
    """Bigger is closer to fitting: resources covered, then the worst coverage ratio."""
    covered = sum(1 for r, v in requests.items() if allocatable.get(r, Decimal(0)) >= v)
    worst = min((allocatable.get(r, Decimal(0)) / v for r, v in requests.items()), default=Decimal(0))
    return covered, worst


def show(value: Decimal, resource: str) -> str:
    """Allocatable as people read it: memory in Gi with one decimal (nodes report odd Ki values)."""
    if resource in ("memory", "ephemeral-storage") and value >= 2**30 and value % 2**30:
        return f"{(value / 2**30).quantize(Decimal('0.1'))}Gi"
    return format_quantity(value, resource)


def _list(values: Mapping[str, Decimal], resources: Sequence[str]) -> str:
    return ", ".join(f"{r} {show(values.get(r, Decimal(0)), r)}" for r in resources)


@dataclass(frozen=True)
class NodeFitParams:
    # The launcher is one small pod; admins who only care about workers can leave it out.
    check_launcher: bool = True


class NodeFit:
    id = "node-fit"
    Params = NodeFitParams
    default_action = Action.WARN
    needs_cluster = True

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        nodes = ctx.cluster.nodes()
        if not nodes:  # nothing known (yet): an empty or scaled-to-zero cluster says nothing
            return
        params: NodeFitParams = ctx.params(self.id)
        # Parsed once per request: every pod is held against every node, several times.
        allocatable = {id(n): _allocatable(n) for n in nodes}
        advertised = {r for values in allocatable.values() for r, v in values.items() if v > 0}
        missing_reported: set[str] = set()
        for pod in request_pods(ctx):
            if pod.replica_type == LAUNCHER and not params.check_launcher:
                continue
            requests = {r: v for r, v in pod.requests.items() if v > 0}
            unknown = sorted(r for r in requests if is_extended(r) and r not in advertised)
            for resource in unknown:
                if resource not in missing_reported:
                    missing_reported.add(resource)
                    yield Finding(
                        self.id, f"{pod.path}.template.spec",
                        f"{resource} is requested but no node in the cluster advertises it; is its device plugin "
                        f"(e.g. the GPU operator) installed, and is the resource name spelled right?",
                        Problem.POLICY, ceiling=Action.WARN)
            if unknown:
                continue
            finding = self._fit(ctx, pod, requests, nodes, allocatable)
            if finding:
                yield finding

    def _fit(self, ctx: RuleContext, pod: PodResources, requests: Mapping[str, Decimal],
             nodes: Sequence[Node], allocatable_of: Mapping[int, Mapping[str, Decimal]]) -> Finding | None:
        template = pod_spec(replica_spec(ctx.job, pod.replica_type))
        for node in nodes:  # the usual case, answered at the first node that can take the pod
            if not _short(requests, allocatable_of[id(node)]) and placement_problem(template, node) is None:
                return None
        ruled_out: dict[str, list[Node]] = {}
        candidates = []
        for node in nodes:
            problem = placement_problem(template, node)
            if problem:
                ruled_out.setdefault(problem, []).append(node)
            else:
                candidates.append(node)
        path = f"{pod.path}.template.spec"
        role = f"a {pod.replica_type} pod"
        if not candidates:
            return Finding(self.id, path, f"no node can ever run {role}: {_reason(ruled_out, len(nodes))}; "
                                          f"{_FIX_PLACEMENT}", Problem.POLICY)
        best = max(candidates, key=lambda n: _score(requests, allocatable_of[id(n)]))
        allocatable = allocatable_of[id(best)]
        short = _short(requests, allocatable)
        if not short:
            return None
        big_enough = {reason: [n for n in group if not _short(requests, allocatable_of[id(n)])]
                      for reason, group in ruled_out.items()}
        big_enough = {reason: group for reason, group in big_enough.items() if group}

        def message(shown: Sequence[str]) -> str:
            asked = f"no matching node can hold {role} ({_list(requests, shown)})"
            if big_enough:  # the pod would fit where it may not go: the placement is the problem
                count = sum(len(group) for group in big_enough.values())
                return f"{asked}; nodes with room are ruled out: {_reason(big_enough, count)}; {_FIX_PLACEMENT}"
            return (f"{asked}; largest of {len(candidates)} matching: {_node_name(best)} with "
                    f"{_list(allocatable, shown)}; use more, smaller pods or larger nodes")

        # a warning is cut at 256 characters: name two of the shortfalls, or one if need be
        text = message(short[:2])
        if not fits_warning(self.id, path, text):
            text = message(short[:1])
        return Finding(self.id, path, text, Problem.POLICY)


_FIX_PLACEMENT = "fix its nodeSelector, affinity or tolerations"


def _reason(groups: Mapping[str, Sequence[Node]], total: int) -> str:
    """The most common reason nodes were ruled out: ``taint … not tolerated on 2 of 3 nodes``."""
    reason, group = max(groups.items(), key=lambda item: len(item[1]))
    return f"{reason} on {len(group)} of {total} {'node' if total == 1 else 'nodes'}"
