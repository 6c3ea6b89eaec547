"""``windowsHostProcess`` (baseline, 1.0+): neither the pod nor a container may set
``securityContext.windowsOptions.hostProcess: true``."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix, for_the_pod
from policies.kube.pod_security.go_strings import named
from policies.kube.pod_security.level_versions import BASELINE
from policies.kube.pod_security.pod_fields import PodView, as_mapping

_ALLOWED = "false, or unset"
_WRITE = "set securityContext.windowsOptions.hostProcess: false, or remove it"


def _host_process(context: Mapping[str, Any] | None) -> bool:
    return context is not None and as_mapping(context.get("windowsOptions")).get("hostProcess") is True


def windows_host_process_1_0(pod: PodView) -> CheckResult | None:
    bad = [container for container in pod.containers if _host_process(container.security_context)]
    setters: list[str] = []
    fixes: list[Fix] = []
    if _host_process(pod.security_context):
        setters.append("pod")
        fixes.append(Fix(None, "spec.securityContext.windowsOptions.hostProcess", _ALLOWED, for_the_pod(_WRITE)))
    if bad:
        setters.append(named("container", "containers", [c.name for c in bad]))
        fixes.extend(Fix(c.name, f"{c.path}.securityContext.windowsOptions.hostProcess", _ALLOWED, _WRITE) for c in bad)
    if not setters:
        return None
    return CheckResult(
        "windowsHostProcess", "hostProcess",
        f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true", tuple(fixes))


CHECK = Check("windowsHostProcess", BASELINE, (VersionedCheck((1, 0), windows_host_process_1_0),))
