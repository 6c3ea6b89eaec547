"""The user checks: ``runAsNonRoot`` (restricted, 1.0+) requires runAsNonRoot=true on the pod or every
container; ``runAsUser`` (restricted, 1.23+) forbids runAsUser=0. From 1.35 both let pods in a user
namespace (``hostUsers: false``) pass."""
from __future__ import annotations

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix, for_the_pod
from policies.kube.pod_security.go_strings import named
from policies.kube.pod_security.level_versions import RESTRICTED
from policies.kube.pod_security.pod_fields import PodView, is_integer

RUN_AS_NON_ROOT_ID = "runAsNonRoot"
RUN_AS_USER_ID = "runAsUser"
_NON_ROOT_WRITE = "set securityContext.runAsNonRoot: true"
_USER_ALLOWED = "a non-zero user ID, or unset"
_USER_WRITE = "set securityContext.runAsUser to a non-zero user ID, or remove it"


def run_as_non_root_1_0(pod: PodView) -> CheckResult | None:
    setters: list[str] = []
    fixes: list[Fix] = []
    pod_value = pod.pod_context_field("runAsNonRoot")
    if pod_value is False:
        setters.append("pod")
        fixes.append(Fix(None, "spec.securityContext.runAsNonRoot", "true", for_the_pod(_NON_ROOT_WRITE)))
    explicitly_bad, implicitly_bad = [], []
    for container in pod.containers:
        value = container.context_field("runAsNonRoot")
        if isinstance(value, bool):
            if not value:
                explicitly_bad.append(container)
        elif pod_value is not True:
            implicitly_bad.append(container)
    if explicitly_bad:
        setters.append(named("container", "containers", [c.name for c in explicitly_bad]))
        fixes.extend(Fix(c.name, f"{c.path}.securityContext.runAsNonRoot", "true", _NON_ROOT_WRITE)
                     for c in explicitly_bad)
    if setters:
        return CheckResult(RUN_AS_NON_ROOT_ID, "runAsNonRoot != true",
                           f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false", tuple(fixes))
    if implicitly_bad:
        return CheckResult(
            RUN_AS_NON_ROOT_ID, "runAsNonRoot != true",
            f"pod or {named('container', 'containers', [c.name for c in implicitly_bad])} "
            "must set securityContext.runAsNonRoot=true",
            tuple(Fix(c.name, f"{c.path}.securityContext.runAsNonRoot", "true (here, or in spec.securityContext)",
                      f"{_NON_ROOT_WRITE} (or once for the whole pod in spec.securityContext)")
                  for c in implicitly_bad))
    return None


def run_as_non_root_1_35(pod: PodView) -> CheckResult | None:
    return None if pod.in_user_namespace() else run_as_non_root_1_0(pod)


def _root(value: object) -> bool:
    return is_integer(value) and value == 0


def run_as_user_1_23(pod: PodView) -> CheckResult | None:
    setters: list[str] = []
    fixes: list[Fix] = []
    if _root(pod.pod_context_field("runAsUser")):
        setters.append("pod")
        fixes.append(Fix(None, "spec.securityContext.runAsUser", _USER_ALLOWED, for_the_pod(_USER_WRITE)))
    bad = [container for container in pod.containers if _root(container.context_field("runAsUser"))]
    if bad:
        setters.append(named("container", "containers", [c.name for c in bad]))
        fixes.extend(Fix(c.name, f"{c.path}.securityContext.runAsUser", _USER_ALLOWED, _USER_WRITE) for c in bad)
    if not setters:
        return None
    return CheckResult(RUN_AS_USER_ID, "runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0", tuple(fixes))


def run_as_user_1_35(pod: PodView) -> CheckResult | None:
    return None if pod.in_user_namespace() else run_as_user_1_23(pod)


RUN_AS_NON_ROOT_CHECK = Check(RUN_AS_NON_ROOT_ID, RESTRICTED, (
    VersionedCheck((1, 0), run_as_non_root_1_0),
    VersionedCheck((1, 35), run_as_non_root_1_35),
))
RUN_AS_USER_CHECK = Check(RUN_AS_USER_ID, RESTRICTED, (
    VersionedCheck((1, 23), run_as_user_1_23),
    VersionedCheck((1, 35), run_as_user_1_35),
))
