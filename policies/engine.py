"""Runs rules and mutations over one request and says what the admin's policy makes of them.

The engine alone attaches actions, applies the "cluster state unavailable" switch and turns an
exception inside a rule into an error (never a silent allow: Kyverno CVE-2025-46342).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

import jsonpatch

from policies import registry
from policies.interface import Action, Finding, Mutation, Problem, Rule, RuleContext
from policies.cluster_view import SnapshotMemo
from policies.mutations.edits import WorkingCopy
from policies.mutations.mutated_fields_check import check_mutation_shape
from policies.mpijob.crd_type_check import check_shape

if TYPE_CHECKING:
    from policies.config.rule_settings import Settings

log = logging.getLogger(__name__)

CLUSTER_STATE_RULE = "cluster-state"
# Read once: reading a member off an Enum class costs more than the comparison it is used for
# (docs/performance.md, "Fast paths kept and removed").
_DENY, _WARN = Action.DENY, Action.WARN


# Slotted, not frozen, like the values in policies.interface: built for every request, never
# written after.
@dataclass(slots=True)
class Outcome:
    finding: Finding
    action: Action


@dataclass(slots=True)
class Verdict:
    outcomes: tuple[Outcome, ...] = ()
    skipped: tuple[str, ...] = ()  # cluster-aware rules not run because the caches were unusable
    error: str | None = None  # a rule failed: the request must be refused, never allowed unchecked
    # The findings by action, sorted out once: the response, the metrics and the audit line
    # all read them. Derived from ``outcomes`` (dataclasses.replace derives them again).
    denials: tuple[Finding, ...] = field(init=False, repr=False, compare=False)
    warnings: tuple[Finding, ...] = field(init=False, repr=False, compare=False)
    audits: tuple[Finding, ...] = field(init=False, repr=False, compare=False)
    allowed: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        denials: list[Finding] = []
        warnings: list[Finding] = []
        audits: list[Finding] = []
        for outcome in self.outcomes:
            if outcome.action is _DENY:
                denials.append(outcome.finding)
            elif outcome.action is _WARN:
                warnings.append(outcome.finding)
            else:
                audits.append(outcome.finding)
        self.denials, self.warnings, self.audits = tuple(denials), tuple(warnings), tuple(audits)
        self.allowed = self.error is None and not denials

    @property
    def is_policy_denial(self) -> bool:
        """Quota-like denials answer 403 Forbidden; field-value ones 422 Invalid."""
        return any(f.problem is Problem.POLICY for f in self.denials)

    def rules_by_action(self) -> dict[Action, tuple[str, ...]]:
        fired: dict[Action, list[str]] = {}
        for outcome in self.outcomes:
            ids = fired.setdefault(outcome.action, [])
            if outcome.finding.rule not in ids:
                ids.append(outcome.finding.rule)
        return {action: tuple(ids) for action, ids in fired.items()}


@dataclass(slots=True)
class MutationResult:
    job: dict[str, Any]  # shares every subtree no mutation changed with the request: read only
    applied: tuple[str, ...] = ()  # ids of the mutations that changed something
    warnings: tuple[str, ...] = ()
    error: str | None = None
    invalid: tuple[Finding, ...] = ()  # shape problems: nothing was mutated, the request is refused


def default_rules() -> Sequence[Rule]:
    """The rules an MPIJob gets (a TrainJob's are ``registry.TRAINJOB_RULES``, passed explicitly)."""
    return registry.MPIJOB_RULES


def default_mutations() -> Sequence[Mutation]:
    return registry.MUTATIONS


ShapeCheck = Callable[[Any], list[Finding]]


def evaluate(ctx: RuleContext, rules: Sequence[Rule] | None = None, *,
             shape_check: ShapeCheck | None = check_shape) -> Verdict:
    """``shape_check``: the type check of the object before any rule reads it (the MPIJob CRD's);
    None for an object the rules read defensively (a TrainJob, through its effective job)."""
    verdict = _evaluate(ctx, rules, shape_check)
    if ctx.operation == "UPDATE" and ctx.old_job is not None and any(
        o.action is not Action.AUDIT and o.finding.rule != CLUSTER_STATE_RULE for o in verdict.outcomes
    ):
        return _ratchet(ctx, verdict, rules, shape_check)
    return verdict


def _evaluate(ctx: RuleContext, rules: Sequence[Rule] | None, shape_check: ShapeCheck | None = check_shape) -> Verdict:
    shape = shape_check(ctx.job) if shape_check is not None else None
    if shape:  # the other rules would be reading garbage: the shape problems are the answer
        return Verdict(tuple(Outcome(f, Action.DENY) for f in shape))
    rules = default_rules() if rules is None else rules
    run, skipped = _per_settings(_rule_plans, _rules_to_run, ctx.settings, rules, bool(ctx.cluster.available))
    outcomes: list[Outcome] = []
    for rule, action in run:
        try:
            findings = list(rule.check(ctx))
        except Exception as exc:  # noqa: BLE001 - any failure must refuse, not allow
            log.exception("rule %s failed", rule.id)
            return Verdict(tuple(outcomes), _skipped_before(rule, rules, skipped),
                           f"rule {rule.id} failed: {type(exc).__name__}: {exc}")
        for finding in findings:  # usually none: no generator built for nothing
            outcomes.append(Outcome(finding, action.capped_by(finding.ceiling)))
    if skipped:
        outcomes.append(Outcome(_skipped_finding(ctx, skipped), ctx.settings.cluster_unavailable))
    return Verdict(tuple(outcomes), skipped)


RulePlan = tuple[tuple[tuple[Rule, Action], ...], tuple[str, ...]]


def _rules_to_run(settings: Settings, rules: Sequence[Rule], cluster_available: bool) -> RulePlan:
    """Each rule that runs, with the action the settings give it, and the ids of the
    cluster-aware rules skipped because cluster state is unavailable."""
    run = tuple((rule, settings.action(rule.id)) for rule in rules if cluster_available or not rule.needs_cluster)
    skipped = () if cluster_available else tuple(rule.id for rule in rules if rule.needs_cluster)
    return run, skipped


def _skipped_before(failed: Rule, rules: Sequence[Rule], skipped: tuple[str, ...]) -> tuple[str, ...]:
    """The skipped rules that come before ``failed``: the evaluation stopped there."""
    before = rules[:next(i for i, rule in enumerate(rules) if rule is failed)]
    return tuple(rule.id for rule in before if rule.id in skipped)


# Per Settings object and rule tuple (and cluster availability: True and False are singletons).
_rule_plans: SnapshotMemo[RulePlan] = SnapshotMemo(_rules_to_run, size=64)
_V = TypeVar("_V")


def _per_settings(memo: SnapshotMemo[_V], derive: Callable[..., _V], settings: Settings,
                  items: Sequence[Any], *extra: object) -> _V:
    """``derive(settings, items, *extra)``, through ``memo``: the policy hands out one Settings
    object per namespace (``Policy.settings_for``) and the rules are the registry's tuple, so
    the same few combinations come back request after request. Keyed on their identity, never
    on the request. A list of rules can change in place, so it is read afresh every time."""
    if type(items) is tuple:
        return memo(settings, items, *extra)
    return derive(settings, items, *extra)


def _ratchet(ctx: RuleContext, verdict: Verdict, rules: Sequence[Rule] | None,
             shape_check: ShapeCheck | None = check_shape) -> Verdict:
    """On UPDATE, a finding the stored object already had word for word is not this update's
    doing: it is recorded (audit) but blocks nothing. Otherwise tightening the policy would
    freeze every older job — Kueue could no longer flip ``runPolicy.suspend`` to start it, nor
    a user edit anything else. Like the API server's own CRD validation ratcheting, only what
    the update changes must meet the current policy. A new or changed problem is enforced."""
    if verdict.error is not None or ctx.old_job is None:
        return verdict
    before = _evaluate(replace(ctx, job=ctx.old_job, old_job=None), rules, shape_check)
    if before.error is not None:
        return verdict
    existing = {_identity(o.finding) for o in before.outcomes}
    ratcheted = tuple(
        Outcome(o.finding, Action.AUDIT)
        if o.finding.rule != CLUSTER_STATE_RULE and _identity(o.finding) in existing
        else o
        for o in verdict.outcomes
    )
    return replace(verdict, outcomes=ratcheted)


def _identity(finding: Finding) -> tuple[str, str, str, Problem]:
    return finding.rule, finding.path, finding.message, finding.problem


def _skipped_finding(ctx: RuleContext, skipped: Iterable[str]) -> Finding:
    reason = ctx.cluster.unavailable_reason or "cluster state is not available yet"
    return Finding(
        CLUSTER_STATE_RULE,
        "",
        f"cluster checks ({', '.join(skipped)}) were not run: {reason}; "
        "quota, LimitRange, nodes and Pod Security were not verified for this job",
        Problem.POLICY,
    )


def mutate(ctx: RuleContext, mutations: Sequence[Mutation] | None = None) -> MutationResult:
    mutations = default_mutations() if mutations is None else mutations
    # Only the fields the mutations read and write: anything else of the wrong type is refused
    # by the API server's schema validation and by /validate, with its path.
    shape = check_mutation_shape(ctx.job, mutations)
    if shape:
        # nothing is mutated; the object may not even be a mapping
        return MutationResult(dict(ctx.job) if isinstance(ctx.job, Mapping) else {}, invalid=tuple(shape))
    job = WorkingCopy(ctx.job)
    applied: list[str] = []
    warnings: list[str] = []
    for mutation in _per_settings(_enabled_by_settings, _enabled_mutations, ctx.settings, mutations):
        try:
            outcome = mutation.apply(job, ctx)
        except Exception as exc:  # noqa: BLE001 - a failed mutation must refuse, not pass half-done
            log.exception("mutation %s failed", mutation.id)
            return MutationResult(dict(ctx.job), tuple(applied), tuple(warnings),
                                  f"mutation {mutation.id} failed: {type(exc).__name__}: {exc}")
        if outcome.warnings:
            warnings += [f"[{mutation.id}] {w}" for w in outcome.warnings]
        if outcome.changed:
            applied.append(mutation.id)
    return MutationResult(dict(job), tuple(applied), tuple(warnings))


def _enabled_mutations(settings: Settings, mutations: Sequence[Mutation]) -> tuple[Mutation, ...]:
    return tuple(mutation for mutation in mutations if settings.enabled(mutation.id))


_enabled_by_settings: SnapshotMemo[tuple[Mutation, ...]] = SnapshotMemo(_enabled_mutations, size=64)


def json_patch(original: Mapping[str, Any], result: MutationResult) -> list[dict[str, Any]]:
    """The JSONPatch (RFC 6902) from the request object to the mutated job: computed, never
    hand-written, so it adds missing parent maps, escapes ``/`` and ``~`` in keys and touches
    only what changed. Empty when no mutation changed anything (the diff is not even run)."""
    if not result.applied:
        return []
    ops = map_diff(original, result.job)
    if ops is not None:
        return ops
    return _in_path_order(original, jsonpatch.make_patch(*_differing(original, result.job)).patch)


_ABSENT = object()


def map_diff(src: Mapping[str, Any], dst: Mapping[str, Any], pointer: str = "") -> list[dict[str, Any]] | None:
    """The patch make_patch computes, in path order, for the usual mutation: keys added to maps,
    scalars replaced and items appended to lists (``_appended``), nothing removed, no list item
    edited. None for anything else (a removal can pair with an addition into a ``move``; lists are
    matched up item by item), which is left to jsonpatch.

    The working copy shares every subtree the mutations left alone with the request, so those are
    skipped by identity without being compared: the walk costs what the mutations copied, not what
    the request holds. Other subtrees are compared with ``==``, which holds ``1`` and ``true``
    equal inside them, as the diff always has: mutations write strings and maps."""
    ops: list[dict[str, Any]] = []
    return ops if _diff_maps(src, dst, pointer, ops) else None


def _diff_maps(src: Mapping[str, Any], dst: Mapping[str, Any], pointer: str, ops: list[dict[str, Any]]) -> bool:
    changed = []
    for key, other in dst.items():
        if src.get(key, _ABSENT) is not other:
            changed.append(key)
    if len(changed) > 1:
        # Keys in order at every level give the operations in path order (a patch independent
        # of the hash seed) with no sort of the whole patch afterwards.
        changed.sort(key=str)
    added = 0
    for key in changed:
        if type(key) is not str:
            return False  # a key no JSON document has: left to jsonpatch
        other = dst[key]
        value = src.get(key, _ABSENT)
        path = f"{pointer}/{_escape(key)}"
        if value is _ABSENT:
            added += 1
            ops.append({"op": "add", "path": path, "value": other})
        elif value == other and type(value) is type(other):  # 0 == False, but not in JSON
            continue
        elif isinstance(value, dict) and isinstance(other, dict):
            if not _diff_maps(value, other, path, ops):
                return False
        elif isinstance(value, list) and isinstance(other, list):
            if not _appended(value, other, path, ops):
                return False
        elif isinstance(value, (dict, list)) or isinstance(other, (dict, list)):
            return False
        else:
            ops.append({"op": "replace", "path": path, "value": other})
    return len(dst) - added == len(src)  # else a key was removed


def _appended(src: list[Any], dst: list[Any], pointer: str, ops: list[dict[str, Any]]) -> bool:
    """Items appended to a list whose other items are the request's very objects (a TrainJob's
    own patch entry added after the user's and Kueue's): jsonpatch's diff matches the common
    start first, so it adds the new items at their indices, in order. False for any other edit."""
    if len(dst) <= len(src) or any(old is not new for old, new in zip(src, dst)):
        return False
    ops.extend({"op": "add", "path": f"{pointer}/{index}", "value": dst[index]} for index in range(len(src), len(dst)))
    return True


def _escape(key: str) -> str:
    """A map key as a JSON pointer token (RFC 6901), as jsonpatch writes it."""
    if "~" in key or "/" in key:
        return key.replace("~", "~0").replace("/", "~1")
    return key


def _differing(src: Mapping[str, Any], dst: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``src`` and ``dst`` without the keys whose values are equal in both, at any depth of
    nested maps. make_patch emits nothing for such keys, but walks and serialises all of them
    (managedFields, whole containers): comparing them at C speed first leaves it only the part
    the mutations touched, and the same patch. Lists are kept whole: their diff is by index."""
    src_left, dst_left = {}, {}
    for key, value in src.items():
        if key in dst:
            other = dst[key]
            if value is other or (value == other and type(value) is type(other)):
                continue
            if isinstance(value, dict) and isinstance(other, dict):
                value, other = _differing(value, other)
            dst_left[key] = other
        src_left[key] = value
    for key, other in dst.items():
        if key not in src:
            dst_left[key] = other
    return src_left, dst_left


def _in_path_order(original: Any, patch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """make_patch visits dict keys as a set, so its order follows the process's string hash seed
    and differs between server processes. When every operation sets or removes one key of a map
    the request already has, the operations are independent: sorted by path, the patch is the
    same everywhere. Edits of lists (where order matters) keep jsonpatch's order."""
    keyed = []
    for op in patch:
        parts = [part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]]
        if op["op"] not in ("add", "replace", "remove") or not parts or not _is_map_path(original, parts[:-1]):
            return patch
        keyed.append((parts, op))
    return [op for _, op in sorted(keyed, key=lambda item: item[0])]


def _is_map_path(node: Any, parts: list[str]) -> bool:
    for part in parts:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return isinstance(node, Mapping)
