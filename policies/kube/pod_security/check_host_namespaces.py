"""``hostNamespaces`` (baseline, 1.0+): no ``hostNetwork``, ``hostPID`` or ``hostIPC``."""
from __future__ import annotations

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix
from policies.kube.pod_security.level_versions import BASELINE
from policies.kube.pod_security.pod_fields import PodView

_FIELDS = ("hostNetwork", "hostPID", "hostIPC")


def host_namespaces_1_0(pod: PodView) -> CheckResult | None:
    shared = [field for field in _FIELDS if pod.spec.get(field) is True]
    if not shared:
        return None
    return CheckResult(
        "hostNamespaces", "host namespaces", ", ".join(f"{field}=true" for field in shared),
        tuple(Fix(None, f"spec.{field}", "false, or unset", f"set spec.{field}: false, or remove it")
              for field in shared))


CHECK = Check("hostNamespaces", BASELINE, (VersionedCheck((1, 0), host_namespaces_1_0),))
