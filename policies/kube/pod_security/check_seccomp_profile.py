"""The seccomp checks: ``seccompProfile_baseline`` (baseline) allows only the runtime's default or a
localhost profile where one is set (before 1.19 in the alpha annotations, from 1.19 in
securityContext.seccompProfile); ``seccompProfile_restricted`` (restricted, 1.19+, in place of the
baseline one) requires one on the pod or every container, Windows pods exempt from 1.25."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix, for_the_pod
from policies.kube.pod_security.go_strings import go_quote, join_quote, named, pluralize, sorted_set
from policies.kube.pod_security.level_versions import BASELINE, RESTRICTED
from policies.kube.pod_security.pod_fields import PodView, as_string

BASELINE_ID = "seccompProfile_baseline"
RESTRICTED_ID = "seccompProfile_restricted"
POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
CONTAINER_ANNOTATION_PREFIX = "container.seccomp.security.alpha.kubernetes.io/"
_VALID_TYPES = frozenset({"RuntimeDefault", "Localhost"})
_TYPE_ALLOWED = '"RuntimeDefault" or "Localhost"'
_TYPE_WRITE = "set securityContext.seccompProfile.type: RuntimeDefault (or Localhost with its localhostProfile)"


def _valid_annotation(value: str) -> bool:
    return value in ("runtime/default", "docker/default") or value.startswith("localhost/")


def seccomp_profile_baseline_1_0(pod: PodView) -> CheckResult | None:
    keys = [(None, POD_ANNOTATION)] + [(c.name, CONTAINER_ANNOTATION_PREFIX + c.name) for c in pod.containers]
    forbidden: dict[str, tuple[str | None, str]] = {}     # the "key=\"value\"" text: (container, key)
    for container, key in keys:
        value = pod.annotations.get(key)
        if value is not None and not _valid_annotation(value):
            forbidden.setdefault(f"{key}={go_quote(value)}", (container, key))
    if not forbidden:
        return None
    texts = sorted(forbidden)
    return CheckResult(
        BASELINE_ID, "seccompProfile",
        f"forbidden {pluralize('annotation', 'annotations', len(texts))} {', '.join(texts)}",
        tuple(Fix(container, f"metadata.annotations[{key}]", '"runtime/default", "docker/default" or "localhost/<profile>"',
                  f"set the annotation {key} to runtime/default, or remove it")
              for container, key in (forbidden[text] for text in texts)))


def _explicit_type(context: Mapping[str, Any] | None) -> str | None:
    """The seccomp profile type a securityContext sets ("" for a profile without one); None if unset."""
    profile = None if context is None else context.get("seccompProfile")
    return as_string(profile.get("type")) if isinstance(profile, dict) else None


def _seccomp_profile(pod: PodView, check_id: str, required: bool) -> CheckResult | None:
    """Upstream's seccompProfileBaseline_1_19 (``required`` False) and seccompProfileRestricted_1_19."""
    setters: list[str] = []
    bad_values: list[str] = []
    fixes: list[Fix] = []
    allowed = _TYPE_ALLOWED if required else f"{_TYPE_ALLOWED}, or unset"
    pod_type = _explicit_type(pod.security_context)
    if pod_type is not None and pod_type not in _VALID_TYPES:
        setters.append("pod")
        bad_values.append(pod_type)
        fixes.append(Fix(None, "spec.securityContext.seccompProfile.type", allowed, for_the_pod(_TYPE_WRITE)))
    pod_set = pod_type in _VALID_TYPES
    explicitly_bad, implicitly_bad = [], []
    for container in pod.containers:
        container_type = _explicit_type(container.security_context)
        if container_type is not None:
            if container_type not in _VALID_TYPES:
                explicitly_bad.append(container)
                bad_values.append(container_type)
        elif required and not pod_set:
            implicitly_bad.append(container)
    if explicitly_bad:
        setters.append(named("container", "containers", [c.name for c in explicitly_bad]))
        fixes.extend(Fix(c.name, f"{c.path}.securityContext.seccompProfile.type", allowed, _TYPE_WRITE)
                     for c in explicitly_bad)
    if setters:
        return CheckResult(
            check_id, "seccompProfile",
            f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to "
            f"{join_quote(sorted_set(bad_values))}", tuple(fixes))
    if implicitly_bad:
        return CheckResult(
            check_id, "seccompProfile",
            f"pod or {named('container', 'containers', [c.name for c in implicitly_bad])} "
            'must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"',
            tuple(Fix(c.name, f"{c.path}.securityContext.seccompProfile.type",
                      f"{_TYPE_ALLOWED} (here, or in spec.securityContext)",
                      f"{_TYPE_WRITE}, here or once for the whole pod in spec.securityContext")
                  for c in implicitly_bad))
    return None


def seccomp_profile_baseline_1_19(pod: PodView) -> CheckResult | None:
    return _seccomp_profile(pod, BASELINE_ID, required=False)


def seccomp_profile_restricted_1_19(pod: PodView) -> CheckResult | None:
    return _seccomp_profile(pod, RESTRICTED_ID, required=True)


def seccomp_profile_restricted_1_25(pod: PodView) -> CheckResult | None:
    return None if pod.is_windows() else seccomp_profile_restricted_1_19(pod)


BASELINE_CHECK = Check(BASELINE_ID, BASELINE, (
    VersionedCheck((1, 0), seccomp_profile_baseline_1_0),
    VersionedCheck((1, 19), seccomp_profile_baseline_1_19),
))
RESTRICTED_CHECK = Check(RESTRICTED_ID, RESTRICTED, (
    VersionedCheck((1, 19), seccomp_profile_restricted_1_19, (BASELINE_ID,)),
    VersionedCheck((1, 25), seccomp_profile_restricted_1_25, (BASELINE_ID,)),
))
