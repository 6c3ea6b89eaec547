"""``privileged`` (baseline, 1.0+): no container may set ``securityContext.privileged: true``."""
from __future__ import annotations

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix
from policies.kube.pod_security.go_strings import named
from policies.kube.pod_security.level_versions import BASELINE
from policies.kube.pod_security.pod_fields import PodView


def privileged_1_0(pod: PodView) -> CheckResult | None:
    bad = [container for container in pod.containers if container.context_field("privileged") is True]
    if not bad:
        return None
    return CheckResult(
        "privileged", "privileged",
        f"{named('container', 'containers', [c.name for c in bad])} must not set securityContext.privileged=true",
        tuple(Fix(c.name, f"{c.path}.securityContext.privileged", "false, or unset",
                  "set securityContext.privileged: false, or remove it") for c in bad))


CHECK = Check("privileged", BASELINE, (VersionedCheck((1, 0), privileged_1_0),))
