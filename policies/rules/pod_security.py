"""``pod-security``: the pods a job will create, checked as the namespace's PodSecurity admission
will check them when the controller creates them.

Pod Security Admission judges pods, not MPIJobs or TrainJobs: a job whose Launcher or Worker
template breaks its namespace's level is accepted, and then the MPI operator (or the Job
controller under a JobSet) fails to create its pods, over and over. This rule evaluates each pod
template (an MPIJob's Launcher and Worker, a TrainJob's effective ``launcher`` and ``node``) with
the upstream checks (``policies.kube.pod_security``) at the levels the namespace's labels name,
read as the API server reads them:

- ``pod-security.kubernetes.io/enforce`` (and ``enforce-version``, ``latest`` when unset): a
  violation denies; an invalid level is read as ``restricted``, an invalid version as ``latest``;
- ``warn`` / ``warn-version``: warnings; ``audit`` / ``audit-version``: audit-log entries (an
  invalid ``warn`` or ``audit`` level is read as ``privileged``: nothing).

The policy may add a level of its own (``defaultLevel`` for namespaces without an enforce label,
``minimumLevel`` for every namespace it applies to, set per namespace with overrides) and relax
only that with ``exceptions``: what the namespace enforces is never relaxed, so a job the API
server would refuse is never admitted. ``exemptions`` mirror the API server's own PodSecurity
exemptions (usernames, runtime classes, namespaces), which the webhook cannot see.
Each problem is reported once, at its strongest action.
"""
from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from policies.cluster_view import SnapshotMemo
from policies.interface import Action, Finding, Problem, RuleContext
from policies.messages import fits_warning
from policies.kube.pod_security import (
    AUDIT_LABEL,
    ENFORCE_LABEL,
    PRIVILEGED,
    WARN_LABEL,
    NamespacePolicy,
    policy_to_evaluate,
    CheckResult,
    Fix,
    LevelVersion,
    compare_levels,
    evaluate_pod,
    parse_version,
)
from policies.trainer.trainjob_review import review_of
from policies.trainer.trainjob_workload import RUNTIME_REF
from policies.workload import PodGroup, Role, Source, request_workload

LABEL_PREFIX = "pod-security.kubernetes.io/"
Level = Literal["privileged", "baseline", "restricted"]
# Upstream's check IDs (k8s.io/pod-security-admission/policy): what ``exceptions.checks`` may name.
CheckId = Literal[
    "allowPrivilegeEscalation", "appArmorProfile", "capabilities_baseline", "capabilities_restricted",
    "hostNamespaces", "hostPathVolumes", "hostPorts", "hostProbesAndHostLifecycle", "privileged", "procMount",
    "procMount_restricted",
    "restrictedVolumes", "runAsNonRoot", "runAsUser", "seLinuxOptions", "seccompProfile_baseline",
    "seccompProfile_restricted", "sysctls", "windowsHostProcess",
]
CHECK_IDS: tuple[str, ...] = typing.get_args(CheckId)
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_NONE: Mapping[str, Any] = {}


def _version(text: str, name: str) -> None:
    try:
        parse_version(text)
    except ValueError as exc:
        raise ValueError(f"{name} {text!r}: {exc}") from None


@dataclass(frozen=True)
class PodSecurityExceptions:
    # Capabilities a container may add although the policy's own level forbids them (IPC_LOCK for
    # RDMA, SYS_PTRACE for some MPI debuggers); spelled as in capabilities.add
    capabilities: tuple[str, ...] = ()
    # Upstream check IDs the policy's own level does not apply (capabilities_restricted, runAsNonRoot, …)
    checks: tuple[CheckId, ...] = ()


@dataclass(frozen=True)
class PodSecurityExemptions:
    # As the API server's PodSecurity admission configuration (exemptions.usernames): the
    # identities whose pods it never checks; keep the two lists the same
    usernames: tuple[str, ...] = ()
    # As exemptions.runtimeClasses: pods with one of these runtimeClassName are not checked
    runtime_classes: tuple[str, ...] = ()
    # As exemptions.namespaces
    namespaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodCreators:
    # Who creates the pods, as the API server sees the request (userInfo.username): matched against
    # exemptions.usernames. An MPIJob's launcher is a batch Job: its pod comes from the Job controller
    mpi_job_launcher: str = "system:serviceaccount:kube-system:job-controller"
    # An MPIJob's worker pods come from the MPI operator itself
    mpi_job_worker: str = "system:serviceaccount:mpi-operator:mpi-operator"
    # A TrainJob's pods: the Trainer controller creates a JobSet, the JobSet controller its Jobs,
    # and the Job controller the pods
    train_job: str = "system:serviceaccount:kube-system:job-controller"


@dataclass(frozen=True)
class PodSecurityParams:
    # The level for namespaces without a pod-security.kubernetes.io/enforce label (privileged: none)
    default_level: Level = "privileged"
    # Its version: latest or v1.N
    default_version: str = "latest"
    # A level every namespace the setting applies to must meet, whatever its labels say (set it
    # per namespace with overrides; privileged: none)
    minimum_level: Level = "privileged"
    # Its version: latest or v1.N
    minimum_version: str = "latest"
    # What the policy's own levels (defaultLevel, minimumLevel) let through; never what a namespace enforces
    exceptions: PodSecurityExceptions = field(default_factory=PodSecurityExceptions)
    # The API server's own PodSecurity exemptions, stated again: the webhook cannot see them
    exemptions: PodSecurityExemptions = field(default_factory=PodSecurityExemptions)
    # Who creates each kind of pod, for exemptions.usernames
    pod_creators: PodCreators = field(default_factory=PodCreators)
    # The cluster's Kubernetes version (v1.N): its API server knows no policy version past its own,
    # so "latest", and any newer version a label names, are evaluated as this one
    api_server_version: str = "v1.36"

    def __post_init__(self) -> None:
        _version(self.default_version, "defaultVersion")
        _version(self.minimum_version, "minimumVersion")
        _version(self.api_server_version, "apiServerVersion")

    @property
    def emulation_version(self) -> tuple[int, int] | None:
        return parse_version(self.api_server_version)


def _level(level: str, version: str) -> LevelVersion:
    return LevelVersion(level, parse_version(version))


class _Mode(NamedTuple):
    """One evaluation: the level, where it comes from (for the message) and its action ceiling."""

    level: LevelVersion
    source: str  # 'namespace team-a (pod-security.kubernetes.io/enforce)' | 'the policy (minimumLevel)'
    ceiling: Action
    policy_added: bool  # the policy's own level: exceptions apply


class PodSecurity:
    id = "pod-security"
    Params = PodSecurityParams
    default_action = Action.DENY
    needs_cluster = True  # the namespace's labels come from the namespace cache

    def check(self, ctx: RuleContext) -> list[Finding]:
        # A namespace the cache does not hold reads as one without labels
        namespace = ctx.cluster.namespace(ctx.namespace) or _NONE
        params: PodSecurityParams = ctx.params(self.id)
        if params.default_level == PRIVILEGED and params.minimum_level == PRIVILEGED and \
                not _labelled(_labels(namespace)):
            return []  # the usual namespace: no label to read, no level of the policy's own
        modes, errors = _namespace_modes(namespace, params)
        if not modes and not errors:
            return []
        workload = request_workload(ctx)
        review = review_of(ctx)
        findings: list[Finding] = []
        if errors:
            findings.append(Finding(
                self.id, "", f"namespace {ctx.namespace} has PodSecurity labels the API server cannot read "
                f"({'; '.join(errors)}); it evaluates pods as if the enforce level were restricted "
                "and the warn and audit levels privileged: fix the labels", Problem.POLICY, ceiling=Action.AUDIT))
        namespace_exempt = ctx.namespace in params.exemptions.namespaces
        for group in workload.present_groups():
            creator = _creator(group, params.pod_creators, review is not None)
            runtime_class = group.template.get("runtimeClassName")
            exempt = namespace_exempt or creator in params.exemptions.usernames or \
                (isinstance(runtime_class, str) and runtime_class in params.exemptions.runtime_classes)
            pod_fields = _pod_fields(review, group)
            findings += self._group(group, [m for m in modes if m.policy_added or not exempt], params, pod_fields,
                                    workload.kind.kind)
        return findings

    def _group(self, group: PodGroup, modes: Sequence[_Mode], params: PodSecurityParams,
               pod_fields: Mapping[str, Any] | None, kind: str) -> list[Finding]:
        metadata = group.pod_template.get("metadata") or {}
        spec = group.template
        relaxed: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None
        reported: set[tuple[str, str]] = set()  # (check, field): each problem once, at its strongest
        findings: list[Finding] = []
        for mode in modes:
            if mode.policy_added:
                if relaxed is None:
                    relaxed = metadata, _without_capabilities(spec, params.exceptions.capabilities)
                results = [r for r in evaluate_pod(mode.level, *relaxed, emulation_version=params.emulation_version)
                           if r.check_id not in params.exceptions.checks]
            else:  # each level once: _modes drops repeats
                results = evaluate_pod(mode.level, metadata, spec, emulation_version=params.emulation_version)
            for result in results:
                for fix in result.fixes or (Fix(None, "spec", "", ""),):
                    if (result.check_id, fix.field) in reported:
                        continue
                    reported.add((result.check_id, fix.field))
                    findings.append(self._finding(group, mode, result, fix, pod_fields, kind))
        return findings

    def _finding(self, group: PodGroup, mode: _Mode, result: CheckResult, fix: Fix,
                 pod_fields: Mapping[str, Any] | None, kind: str) -> Finding:
        source = _fix_source(group, fix.field, pod_fields)
        verb = "violate" if mode.ceiling is Action.DENY else "would violate"
        pods = f"the {group.name} pods" if kind == "MPIJob" else f"the TrainJob's {group.name} pods"
        container = f', container "{fix.container}"' if fix.container is not None else ""
        head = f'{pods} {verb} PodSecurity "{mode.level}" of {mode.source}: check {result.check_id}{container}'
        reason = result.forbidden_reason if result.forbidden_reason != result.check_id else ""
        if not fix.write and result.forbidden_detail:  # no place to name: upstream's whole detail
            reason = f"{reason} ({result.forbidden_detail})"
        allowed = f"; allowed: {fix.allowed}" if fix.allowed else ""
        write = f"; {fix.write}" if fix.write else ""
        message = source.said(f"{head}{': ' + reason if reason else ''}{allowed}{write}")
        if mode.ceiling is not Action.DENY and not fits_warning(self.id, source.finding_path, message):
            # a warning arrives whole only up to 256 characters: the label, the check and the fix
            short = f'{group.name} pods would violate PodSecurity "{mode.level}" ({mode.ceiling.value} label)'
            shorter = (f"{short}: check {result.check_id}{container}{write or allowed}",
                       f"{short}: check {result.check_id}{write or allowed}", f"{short}{write or allowed}",
                       f"{short}: check {result.check_id}")
            message = next((m for m in map(source.said, shorter) if fits_warning(self.id, source.finding_path, m)),
                           source.said(shorter[-1]))
        return Finding(self.id, source.finding_path, message, Problem.POLICY, ceiling=mode.ceiling)


def _read_modes(namespace: Mapping[str, Any], params: PodSecurityParams) -> tuple[list[_Mode], list[str]]:
    labels = _labels(namespace)
    read, errors = policy_to_evaluate(labels)
    name = str((namespace.get("metadata") or _NONE).get("name") or "")
    return _modes(name, read, ENFORCE_LABEL in labels, params), errors


# Per snapshot of the namespace (the cache's object: another one when its labels change) and
# parameters (one object per policy and namespace): not read again on every request.
_namespace_modes: SnapshotMemo[tuple[list[_Mode], list[str]]] = SnapshotMemo(_read_modes, size=4096)


def _labels(namespace: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = (namespace.get("metadata") or _NONE).get("labels") or _NONE
    return labels if isinstance(labels, Mapping) else _NONE


def _labelled(labels: Mapping[str, Any]) -> bool:
    """Whether the namespace has a PodSecurity label (a loop: cheaper than any() of a generator,
    and run for every request)."""
    for key in labels:
        if key.startswith(LABEL_PREFIX):
            return True
    return False


def _modes(namespace: str, read: NamespacePolicy, labelled: bool, params: PodSecurityParams) -> list[_Mode]:
    """The evaluations to run, strongest first: the namespace's enforce level, the policy's own,
    then the namespace's warn and audit levels. Privileged levels are left out: they check nothing."""
    where = f"namespace {namespace}"
    modes = [_Mode(read.enforce, f"{where} ({ENFORCE_LABEL})", Action.DENY, False)]
    own = _level(params.minimum_level, params.minimum_version)
    source = "the policy (minimumLevel)"
    if not labelled:
        default = _level(params.default_level, params.default_version)
        if compare_levels(default.level, own.level) > 0 or own.level == PRIVILEGED:
            own, source = default, "the policy (defaultLevel, the namespace has no enforce label)"
    if own != read.enforce:
        modes.append(_Mode(own, source, Action.DENY, True))
    # A warn or audit level the enforce level already judges adds nothing: its findings would all
    # be the denials again (the API server, too, evaluates each level and version once).
    if read.warn != read.enforce:
        modes.append(_Mode(read.warn, f"{where} ({WARN_LABEL})", Action.WARN, False))
    if read.audit not in (read.enforce, read.warn):
        modes.append(_Mode(read.audit, f"{where} ({AUDIT_LABEL})", Action.AUDIT, False))
    return [mode for mode in modes if mode.level.level != PRIVILEGED]


def _creator(group: PodGroup, creators: PodCreators, trainjob: bool) -> str:
    if trainjob:
        return creators.train_job
    return creators.mpi_job_launcher if group.role is Role.LAUNCHER else creators.mpi_job_worker


def _without_capabilities(spec: Mapping[str, Any], allowed: Sequence[str]) -> Mapping[str, Any]:
    """``spec`` with the ``allowed`` capabilities taken out of every container's
    ``capabilities.add``: what the policy's own level then judges. A copy where it changes."""
    if not allowed:
        return spec
    copied: dict[str, Any] = dict(spec)
    for kind in _CONTAINER_LISTS:
        containers = spec.get(kind)
        if not isinstance(containers, (list, tuple)):
            continue
        listed = []
        for container in containers:
            context = container.get("securityContext") if isinstance(container, Mapping) else None
            capabilities = context.get("capabilities") if isinstance(context, Mapping) else None
            added = capabilities.get("add") if isinstance(capabilities, Mapping) else None
            if isinstance(added, (list, tuple)) and any(c in allowed for c in added):
                kept = [c for c in added if c not in allowed]
                container = {**container, "securityContext": {  # type: ignore[dict-item]
                    **context, "capabilities": {**capabilities, "add": kept}}}  # type: ignore[dict-item]
            listed.append(container)
        copied[kind] = listed
    return copied


# --- where a field of the pod template was written ------------------------------------------

def _pod_fields(review: Any, group: PodGroup) -> Mapping[str, Any] | None:
    """A TrainJob's replicated job's ``pod_fields`` (where each pod spec field was last written);
    None for an MPIJob, whose template is all written in the job."""
    if review is None or review.effective is None:
        return None
    for job in review.effective.jobs:
        if job.name == group.name:
            return job.pod_fields  # type: ignore[no-any-return]
    return {}


def _fix_source(group: PodGroup, path: str, pod_fields: Mapping[str, Any] | None) -> Source:
    """Where ``path`` (a field of the pod template: ``spec.containers[0].securityContext``) is
    written: in an MPIJob, under its replica's ``template``; in a TrainJob, in the runtime's pod
    template or the TrainJob's patch that wrote that field or container last."""
    if pod_fields is None:
        return Source(f"{group.source.path}.template.{path}")
    for container in group.containers:
        suffix = container.path.rsplit(".", 1)[-1]  # containers[0]
        if path.startswith(f"spec.{suffix}"):
            rest = path[len(f"spec.{suffix}"):]
            return Source(container.path + rest, container.origin, container.reported_at)
    top, _, rest = path.partition(".")
    key = top + "." + rest.split(".", 1)[0].split("[", 1)[0]
    written = pod_fields.get(key)
    tail = path[len(key):]
    if written is not None:
        return Source(written.path + tail, group.source.origin if written.in_runtime else "",
                      RUNTIME_REF if written.in_runtime else "")
    return Source(f"{group.source.path}.template.spec.template.{path}", group.source.origin, group.source.reported_at)
