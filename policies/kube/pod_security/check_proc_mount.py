"""The procMount checks: ``procMount`` (baseline, 1.0+) allows only the default /proc masks, and from
1.35 any value in a user namespace (``hostUsers: false``); ``procMount_restricted`` (restricted,
1.35+, in place of the baseline one) keeps the default masks required in user namespaces too."""
from __future__ import annotations

from collections.abc import Callable

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix
from policies.kube.pod_security.go_strings import join_quote, named, sorted_set
from policies.kube.pod_security.level_versions import BASELINE, RESTRICTED
from policies.kube.pod_security.pod_fields import PodView

BASELINE_ID = "procMount"
RESTRICTED_ID = "procMount_restricted"
_ALLOWED = '"Default", or unset'
_ALLOWED_IN_USER_NAMESPACES = '"Default", or unset (any value when spec.hostUsers is false)'


def _default_masks_required(check_id: str, allowed: str) -> Callable[[PodView], CheckResult | None]:
    """Upstream's procMount_1_0, which both checks run, each under its own ID."""
    def check(pod: PodView) -> CheckResult | None:
        bad = [(container, value) for container in pod.containers
               if isinstance(value := container.context_field("procMount"), str) and value != "Default"]
        if not bad:
            return None
        return CheckResult(
            check_id, "procMount",
            f"{named('container', 'containers', [c.name for c, _ in bad])} must not set securityContext.procMount to "
            f"{join_quote(sorted_set(value for _, value in bad))}",
            tuple(Fix(c.name, f"{c.path}.securityContext.procMount", allowed,
                      "set securityContext.procMount: Default, or remove it") for c, _ in bad))
    return check


proc_mount_1_0 = _default_masks_required(BASELINE_ID, _ALLOWED)
_proc_mount_outside_user_namespaces = _default_masks_required(BASELINE_ID, _ALLOWED_IN_USER_NAMESPACES)


def proc_mount_1_35_baseline(pod: PodView) -> CheckResult | None:
    return None if pod.in_user_namespace() else _proc_mount_outside_user_namespaces(pod)


BASELINE_CHECK = Check(BASELINE_ID, BASELINE, (
    VersionedCheck((1, 0), proc_mount_1_0),
    VersionedCheck((1, 35), proc_mount_1_35_baseline),
))
RESTRICTED_CHECK = Check(RESTRICTED_ID, RESTRICTED, (
    VersionedCheck((1, 35), _default_masks_required(RESTRICTED_ID, _ALLOWED), (BASELINE_ID,)),))
