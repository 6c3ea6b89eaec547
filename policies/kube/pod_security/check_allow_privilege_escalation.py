"""``allowPrivilegeEscalation`` (restricted, 1.8+): every container must set
``securityContext.allowPrivilegeEscalation: false``; from 1.25 Windows pods are exempt."""
from __future__ import annotations

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix
from policies.kube.pod_security.go_strings import named
from policies.kube.pod_security.level_versions import RESTRICTED
from policies.kube.pod_security.pod_fields import PodView

CHECK_ID = "allowPrivilegeEscalation"


def allow_privilege_escalation_1_8(pod: PodView) -> CheckResult | None:
    bad = [container for container in pod.containers
           if container.context_field("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return CheckResult(
        CHECK_ID, "allowPrivilegeEscalation != false",
        f"{named('container', 'containers', [c.name for c in bad])} "
        "must set securityContext.allowPrivilegeEscalation=false",
        tuple(Fix(c.name, f"{c.path}.securityContext.allowPrivilegeEscalation", "false",
                  "set securityContext.allowPrivilegeEscalation: false") for c in bad))


def allow_privilege_escalation_1_25(pod: PodView) -> CheckResult | None:
    return None if pod.is_windows() else allow_privilege_escalation_1_8(pod)


CHECK = Check(CHECK_ID, RESTRICTED, (
    VersionedCheck((1, 8), allow_privilege_escalation_1_8),
    VersionedCheck((1, 25), allow_privilege_escalation_1_25),
))
