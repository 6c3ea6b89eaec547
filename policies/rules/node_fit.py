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
from typing import Any, NamedTuple

from policies.interface import Action, Finding, Problem, RuleContext
from policies.cluster_view import SnapshotMemo
from policies.messages import fits_warning
from policies.kube.quantities import format_quantity, is_extended
from policies.kube.pod_resources import PodResources, parse_resources, request_pods
from policies.workload import Role, Source

# Read once: a member read off an Enum class is a Python call on 3.11 (docs/performance.md, "Fast
# paths kept and removed"), and these are read for every pod of every request.
_LAUNCHER = Role.LAUNCHER

Node = Mapping[str, Any]
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_ZERO = Decimal(0)


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


def blocking_taints(node: Node) -> tuple[Mapping[str, Any], ...]:
    """The node's taints that keep pods off unless tolerated; a cordoned node has one more."""
    node_spec = node.get("spec") or {}
    taints = [t for t in node_spec.get("taints") or () if isinstance(t, Mapping)]
    if node_spec.get("unschedulable"):
        taints.append(_UNSCHEDULABLE_TAINT)
    return tuple(t for t in taints if t.get("effect") in _BLOCKING_EFFECTS)


def placement_problem(pod: Mapping[str, Any], node: Node,
                      taints: Sequence[Mapping[str, Any]] | None = None) -> str | None:
    """Why the pod can never be placed on ``node`` whatever its size, or None. ``taints``: the
    node's ``blocking_taints``, when worked out already."""
    selector = pod.get("nodeSelector")
    if selector:
        labels = _labels(node)
        for key, value in selector.items():
            if labels.get(key) != value:
                return f"no label {key}={value}"
    terms = _required_terms(pod) if pod.get("affinity") else None
    if terms is not None and not any(_term_matches(t, node) for t in terms):
        return "not matched by the required node affinity"
    if taints is None:
        taints = blocking_taints(node)
    if taints:
        tolerations = [t for t in pod.get("tolerations") or () if isinstance(t, Mapping)]
        for taint in taints:
            if not _tolerates(tolerations, taint):
                return f"taint {_taint_text(taint)} not tolerated"
    return None


# --- capacity -----------------------------------------------------------------------------

def _allocatable(node: Node) -> Mapping[str, Decimal]:
    values = (node.get("status") or {}).get("allocatable")
    if not isinstance(values, Mapping):
        return {}
    return parse_resources(values)


class NodeFacts(NamedTuple):
    node: Node
    allocatable: Mapping[str, Decimal]
    taints: tuple[Mapping[str, Any], ...]  # blocking_taints


@dataclass(frozen=True)
class Capacity:
    """What node-fit reads of each node, and every resource some node advertises."""

    nodes: tuple[NodeFacts, ...]
    advertised: frozenset[str]
    # Where a pod without nodeSelector, affinity and tolerations may go (only taints rule nodes
    # out), worked out for every node: the pods of most jobs
    unrestricted: Placements


def _capacity(nodes: Sequence[Node]) -> Capacity:
    facts = tuple(NodeFacts(node, _allocatable(node), blocking_taints(node)) for node in nodes)
    unrestricted = Placements({}, _NO_PLACEMENT_FIELDS, facts)
    unrestricted.groups()  # worked out now: shared by every request until a node changes
    return Capacity(facts, frozenset(r for f in facts for r, v in f.allocatable.items() if v > 0), unrestricted)


# Keyed on the ClusterView's snapshot of the nodes: parsed again only when a node changed.
capacity: SnapshotMemo[Capacity] = SnapshotMemo(_capacity, size=16)


def _short(requests: Mapping[str, Decimal], allocatable: Mapping[str, Decimal]) -> list[str]:
    return [r for r, v in requests.items() if v > allocatable.get(r, Decimal(0))]


def _covers(allocatable: Mapping[str, Decimal], requests: Mapping[str, Decimal]) -> bool:
    """``not _short(requests, allocatable)``, without building the list."""
    for resource, value in requests.items():
        if value > allocatable.get(resource, _ZERO):
            return False
    return True


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
        cluster = capacity(nodes)
        missing_reported: set[str] = set()
        placements: list[Placements] = []  # one per distinct set of placement fields of the job's pods
        for pod in request_pods(ctx):
            if pod.role is _LAUNCHER and not params.check_launcher:
                continue
            requests = {r: v for r, v in pod.requests.items() if v > _ZERO}
            unknown = [] if cluster.advertised.issuperset(requests) else \
                sorted(r for r in requests if r not in cluster.advertised and is_extended(r))
            for resource in unknown:
                if resource not in missing_reported:
                    missing_reported.add(resource)
                    source = _sized_at(pod, (resource,)) or pod.template_at
                    yield Finding(
                        self.id, source.finding_path,
                        source.said(f"{resource} is requested but no node in the cluster advertises it; is its "
                                    "device plugin (e.g. the GPU operator) installed, and is the resource name "
                                    "spelled right?"),
                        Problem.POLICY, ceiling=Action.WARN)
            if unknown:
                continue
            finding = self._fit(pod, requests, cluster, _placements_for(pod.template, cluster, placements))
            if finding:
                yield finding

    def _fit(self, pod: PodResources, requests: Mapping[str, Decimal], cluster: Capacity,
             placement: Placements) -> Finding | None:
        # the usual case: answered at the first node that takes the pod
        if placement.complete:
            for facts in placement.groups()[1]:
                if _covers(facts.allocatable, requests):
                    return None
        else:
            for index, (_, allocatable, _) in enumerate(cluster.nodes):
                if _covers(allocatable, requests) and placement.problem(index) is None:
                    return None
        ruled_out, candidates = placement.groups()
        source = pod.template_at
        path = source.finding_path
        role = f"a {pod.replica_type} pod"
        if not candidates:
            return Finding(self.id, path, source.said(f"no node can ever run {role}: "
                                                      f"{_reason(ruled_out, len(cluster.nodes))}; {_FIX_PLACEMENT}"),
                           Problem.POLICY)
        best = max(candidates, key=lambda f: _score(requests, f.allocatable))
        allocatable = best.allocatable
        short = _short(requests, allocatable)
        if not short:
            return None
        big_enough = {reason: [f for f in group if not _short(requests, f.allocatable)]
                      for reason, group in ruled_out.items()}
        big_enough = {reason: group for reason, group in big_enough.items() if group}

        def message(shown: Sequence[str]) -> str:
            asked = f"no matching node can hold {role} ({_list(requests, shown)})"
            if big_enough:  # the pod would fit where it may not go: the placement is the problem
                count = sum(len(group) for group in big_enough.values())
                return f"{asked}; nodes with room are ruled out: {_reason(big_enough, count)}; {_FIX_PLACEMENT}"
            return (f"{asked}; largest of {len(candidates)} matching: {_node_name(best.node)} with "
                    f"{_list(allocatable, shown)}; use more, smaller pods or larger nodes")

        if not big_enough:  # too big for every node it may go to: the size is the problem
            source = _sized_at(pod, short) or source
            path = source.finding_path
        # a warning is cut at 256 characters: name two of the shortfalls, or one if need be
        text = source.said(message(short[:2]))
        if not fits_warning(self.id, path, text):
            text = source.said(message(short[:1]))
        return Finding(self.id, path, text, Problem.POLICY)


def _sized_at(pod: PodResources, short: Sequence[str]) -> Source | None:
    """Where the pod's size was written when that is not its template: a TrainJob's
    ``spec.trainer.resourcesPerNode``, when a container takes from it one of the resources
    ``short`` (no node has enough, or none has any); None for an MPIJob's pods."""
    for container in pod.containers:
        if container.resources_at is not None and any(r in container.requests or r in container.limits for r in short):
            return container.resources_at
    return None


_FIX_PLACEMENT = "fix its nodeSelector, affinity or tolerations"
_UNKNOWN = object()


class Placements:
    """``placement_problem`` of one pod template on each node, worked out when first asked:
    the launcher and the workers usually share their placement fields, and a pod that fits no
    node is looked at twice (for the first node that takes it, then for the message)."""

    __slots__ = ("fields", "_template", "_nodes", "_problems", "_unknown", "_groups")

    def __init__(self, template: Mapping[str, Any], fields: tuple[Any, ...], nodes: Sequence[NodeFacts]) -> None:
        self.fields = fields
        self._template = template
        self._nodes = nodes
        self._problems: list[Any] = [_UNKNOWN] * len(nodes)
        self._unknown = len(nodes)
        self._groups: tuple[dict[str, list[NodeFacts]], list[NodeFacts]] | None = None

    @property
    def complete(self) -> bool:
        """Whether every node's problem is known."""
        return not self._unknown

    def problem(self, index: int) -> str | None:
        problem = self._problems[index]
        if problem is _UNKNOWN:
            facts = self._nodes[index]
            problem = self._problems[index] = placement_problem(self._template, facts.node, facts.taints)
            self._unknown -= 1
        return problem  # type: ignore[no-any-return]

    def groups(self) -> tuple[dict[str, list[NodeFacts]], list[NodeFacts]]:
        """(problem → the nodes it rules out, the nodes that may take the pod), in node order.
        Read only: shared by the pods these placements are for."""
        if self._groups is None:
            ruled_out: dict[str, list[NodeFacts]] = {}
            candidates = []
            for index, facts in enumerate(self._nodes):
                problem = self.problem(index)
                if problem:
                    ruled_out.setdefault(problem, []).append(facts)
                else:
                    candidates.append(facts)
            self._groups = ruled_out, candidates
        return self._groups


def _placement_fields(template: Mapping[str, Any]) -> tuple[Any, ...]:
    """All that ``placement_problem`` reads of a pod."""
    return template.get("nodeSelector"), template.get("affinity"), template.get("tolerations")


_NO_PLACEMENT_FIELDS = (None, None, None)


def _placements_for(template: Mapping[str, Any], cluster: Capacity, known: list[Placements]) -> Placements:
    """The ``Placements`` of a pod template with the same placement fields as ``template``, or a new one."""
    fields = _placement_fields(template)
    if not any(fields):  # placement_problem reads empty fields as absent ones
        return cluster.unrestricted
    for placements in known:
        if placements.fields == fields:
            return placements
    placements = Placements(template, fields, cluster.nodes)
    known.append(placements)
    return placements


def _reason(groups: Mapping[str, Sequence[NodeFacts]], total: int) -> str:
    """The most common reason nodes were ruled out: ``taint … not tolerated on 2 of 3 nodes``."""
    reason, group = max(groups.items(), key=lambda item: len(item[1]))
    return f"{reason} on {len(group)} of {total} {'node' if total == 1 else 'nodes'}"
