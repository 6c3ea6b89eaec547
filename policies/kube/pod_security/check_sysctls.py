"""``sysctls`` (baseline): only the safe sysctls in ``spec.securityContext.sysctls``; the safe set
grows in 1.27, 1.29, 1.32 and 1.37."""
from __future__ import annotations

from collections.abc import Callable

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix
from policies.kube.pod_security.level_versions import BASELINE
from policies.kube.pod_security.pod_fields import PodView, as_list, as_mapping, as_string, is_object

SAFE_1_0 = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start"})
SAFE_1_27 = SAFE_1_0 | {"net.ipv4.ip_local_reserved_ports"}
SAFE_1_29 = SAFE_1_27 | {"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                         "net.ipv4.tcp_keepalive_probes"}
SAFE_1_32 = SAFE_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
SAFE_1_37 = SAFE_1_32 | {"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"}


def _sysctls(safe: frozenset[str]) -> Callable[[PodView], CheckResult | None]:
    allowed = ", ".join(sorted(safe))

    def check(pod: PodView) -> CheckResult | None:
        forbidden = [(index, name) for index, sysctl in enumerate(as_list(pod.pod_context_field("sysctls")))
                     if is_object(sysctl) and (name := as_string(as_mapping(sysctl).get("name"))) not in safe]
        if not forbidden:
            return None
        return CheckResult(
            "sysctls", "forbidden sysctls", ", ".join(name for _, name in forbidden),
            tuple(Fix(None, f"spec.securityContext.sysctls[{index}].name", allowed,
                      f"remove {name or 'this entry'} from spec.securityContext.sysctls") for index, name in forbidden))
    return check


CHECK = Check("sysctls", BASELINE, (
    VersionedCheck((1, 0), _sysctls(SAFE_1_0)),
    VersionedCheck((1, 27), _sysctls(SAFE_1_27)),
    VersionedCheck((1, 29), _sysctls(SAFE_1_29)),
    VersionedCheck((1, 32), _sysctls(SAFE_1_32)),
    VersionedCheck((1, 37), _sysctls(SAFE_1_37)),
))
