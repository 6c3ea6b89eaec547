"""The capability checks: ``capabilities_baseline`` (baseline, 1.0+) allows adding only the
container runtime's default capabilities; ``capabilities_restricted`` (restricted, 1.22+, in place of
the baseline one) requires dropping ALL and allows adding only NET_BIND_SERVICE, Windows pods
exempt from 1.25."""
from __future__ import annotations

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix
from policies.kube.pod_security.go_strings import join_quote, named, sorted_set
from policies.kube.pod_security.level_versions import BASELINE, RESTRICTED
from policies.kube.pod_security.pod_fields import ContainerView, PodView, as_list, is_object

BASELINE_ID = "capabilities_baseline"
RESTRICTED_ID = "capabilities_restricted"
DEFAULT_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
_DEFAULT_TEXT = ", ".join(sorted(DEFAULT_CAPABILITIES))


def _capabilities(container: ContainerView) -> dict[str, object] | None:
    capabilities = container.context_field("capabilities")
    return capabilities if is_object(capabilities) else None


def _added(capabilities: dict[str, object]) -> list[tuple[int, str]]:
    return [(index, name) for index, name in enumerate(as_list(capabilities.get("add"))) if isinstance(name, str)]


def _remove_fix(container: ContainerView, index: int, name: str, allowed: str) -> Fix:
    return Fix(container.name, f"{container.path}.securityContext.capabilities.add[{index}]", allowed,
               f"remove {name} from securityContext.capabilities.add")


def capabilities_baseline_1_0(pod: PodView) -> CheckResult | None:
    bad_containers: list[str] = []
    forbidden: list[str] = []
    fixes: list[Fix] = []
    for container in pod.containers:
        capabilities = _capabilities(container)
        if capabilities is None:
            continue
        added = [(index, name) for index, name in _added(capabilities) if name not in DEFAULT_CAPABILITIES]
        if added:
            bad_containers.append(container.name)
            forbidden.extend(name for _, name in added)
            fixes.extend(_remove_fix(container, index, name, _DEFAULT_TEXT) for index, name in added)
    if not bad_containers:
        return None
    return CheckResult(
        BASELINE_ID, "non-default capabilities",
        f"{named('container', 'containers', bad_containers)} must not include {join_quote(sorted_set(forbidden))} "
        "in securityContext.capabilities.add", tuple(fixes))


def capabilities_restricted_1_22(pod: PodView) -> CheckResult | None:
    missing_drop_all: list[str] = []
    adding_forbidden: list[str] = []
    forbidden: list[str] = []
    fixes: list[Fix] = []
    for container in pod.containers:
        capabilities = _capabilities(container)
        if capabilities is None or "ALL" not in as_list(capabilities.get("drop")):
            missing_drop_all.append(container.name)
            fixes.append(Fix(container.name, f"{container.path}.securityContext.capabilities.drop",
                             'a list that includes "ALL"', 'set securityContext.capabilities.drop: ["ALL"]'))
        if capabilities is None:
            continue
        added = [(index, name) for index, name in _added(capabilities) if name != "NET_BIND_SERVICE"]
        if added:
            adding_forbidden.append(container.name)
            forbidden.extend(name for _, name in added)
            fixes.extend(_remove_fix(container, index, name, "NET_BIND_SERVICE only") for index, name in added)
    details = []
    if missing_drop_all:
        details.append(f"{named('container', 'containers', missing_drop_all)} "
                       'must set securityContext.capabilities.drop=["ALL"]')
    if adding_forbidden:
        details.append(f"{named('container', 'containers', adding_forbidden)} "
                       f"must not include {join_quote(sorted_set(forbidden))} in securityContext.capabilities.add")
    if not details:
        return None
    return CheckResult(RESTRICTED_ID, "unrestricted capabilities", "; ".join(details), tuple(fixes))


def capabilities_restricted_1_25(pod: PodView) -> CheckResult | None:
    return None if pod.is_windows() else capabilities_restricted_1_22(pod)


BASELINE_CHECK = Check(BASELINE_ID, BASELINE, (VersionedCheck((1, 0), capabilities_baseline_1_0),))
RESTRICTED_CHECK = Check(RESTRICTED_ID, RESTRICTED, (
    VersionedCheck((1, 22), capabilities_restricted_1_22, (BASELINE_ID,)),
    VersionedCheck((1, 25), capabilities_restricted_1_25, (BASELINE_ID,)),
))
