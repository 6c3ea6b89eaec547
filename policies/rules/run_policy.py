"""``run-policy``: ``spec.runPolicy``, the job's lifecycle settings.

Owns: ``cleanPodPolicy`` is All, Running or None; ``ttlSecondsAfterFinished``,
``activeDeadlineSeconds``, ``backoffLimit`` and the ``schedulingPolicy`` numbers
(``minAvailable``, ``scheduleTimeoutSeconds``, every ``minResources`` quantity) are not negative;
``managedBy`` names a controller that can run the job and does not change on UPDATE (it is
documented as immutable, but nothing else enforces that: a changed value hands a running job to
another controller, or to none).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.interface import Action, Finding, Problem, RuleContext
from policies.mpijob.field_value_findings import check_choices, negative, not_supported
from policies.mpijob.reading import spec
from policies.kube.quantities import BadQuantity, quantity

CLEAN_POD_POLICIES = ("All", "Running", "None")
MPI_OPERATOR = "kubeflow.org/mpi-operator"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
BASE = "spec.runPolicy"
MANAGED_BY_PATH = f"{BASE}.managedBy"
COUNTS = ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit")
SCHEDULING_COUNTS = ("minAvailable", "scheduleTimeoutSeconds")


@dataclass(frozen=True)
class RunPolicyParams:
    # Controllers a job may be handed to. Narrowing is fine (e.g. no MultiKueue); a controller
    # that is not running leaves the job untouched forever.
    managed_by: tuple[str, ...] = (MPI_OPERATOR, MULTIKUEUE)

    def __post_init__(self) -> None:
        check_choices("managedBy", self.managed_by, (MPI_OPERATOR, MULTIKUEUE))


def run_policy(job: Mapping[str, Any]) -> Mapping[str, Any]:
    return spec(job).get("runPolicy") or {}


def old_managed_by(old_job: Mapping[str, Any]) -> Any:
    """The stored object is not shape-checked (only the new one is): read it defensively."""
    value: Any = old_job
    for key in ("spec", "runPolicy", "managedBy"):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


class RunPolicy:
    id = "run-policy"
    Params = RunPolicyParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        params: RunPolicyParams = ctx.params(self.id)
        policy = run_policy(ctx.job)
        findings = []
        clean = policy.get("cleanPodPolicy")
        if clean is not None and clean not in CLEAN_POD_POLICIES:
            findings.append(not_supported(self.id, f"{BASE}.cleanPodPolicy", clean, CLEAN_POD_POLICIES))
        findings += self._counts(policy, COUNTS, BASE)
        scheduling = policy.get("schedulingPolicy") or {}
        findings += self._counts(scheduling, SCHEDULING_COUNTS, f"{BASE}.schedulingPolicy")
        findings += self._min_resources(scheduling.get("minResources") or {})
        managed_by = self._managed_by(ctx, policy, params)
        if managed_by is not None:
            findings.append(managed_by)
        return findings

    def _counts(self, fields: Mapping[str, Any], names: tuple[str, ...], base: str) -> list[Finding]:
        negatives = []
        for name in names:
            value = fields.get(name)
            if value is not None and (finding := negative(self.id, f"{base}.{name}", value)):
                negatives.append(finding)
        return negatives

    def _min_resources(self, resources: Mapping[str, Any]) -> list[Finding]:
        problems = []
        for resource, value in resources.items():
            path = f"{BASE}.schedulingPolicy.minResources[{resource}]"
            try:
                amount = quantity(value)
            except BadQuantity:
                problems.append(Finding(self.id, path, 'not a quantity; write it like 2, "500m" or "4Gi"',
                                        Problem.INVALID, value))
                continue
            if amount < 0:
                problems.append(Finding(self.id, path, f"must be greater than or equal to 0 (asked {value}); "
                                                       f"set {path} to 0 or more", Problem.INVALID, value))
        return problems

    def _managed_by(self, ctx: RuleContext, policy: Mapping[str, Any], params: RunPolicyParams) -> Finding | None:
        path = MANAGED_BY_PATH
        managed_by = policy.get("managedBy")
        if managed_by is not None and managed_by not in params.managed_by:
            return not_supported(self.id, path, managed_by, params.managed_by)
        if ctx.operation != "UPDATE" or ctx.old_job is None:
            return None
        # Unset means the MPI operator: making that explicit hands the job to no one new.
        before = old_managed_by(ctx.old_job)
        before = before if isinstance(before, str) and before else MPI_OPERATOR
        after = managed_by or MPI_OPERATOR
        if before != after:
            return Finding(self.id, path,
                           f'field is immutable: it was "{before}", and changing it would hand the job to '
                           f'another controller; set {path} back to "{before}", or delete and recreate the job',
                           Problem.INVALID, after)
        return None
