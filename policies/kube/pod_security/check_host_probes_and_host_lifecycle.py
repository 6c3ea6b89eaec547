"""``hostProbesAndHostLifecycle`` (baseline, 1.34+): probes and lifecycle handlers must not set a
``host`` (their httpGet or tcpSocket would reach another machine than the pod)."""
from __future__ import annotations

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix
from policies.kube.pod_security.go_strings import join_quote, pluralize, sorted_set
from policies.kube.pod_security.level_versions import BASELINE
from policies.kube.pod_security.pod_fields import ContainerView, PodView, as_string

CHECK_ID = "hostProbesAndHostLifecycle"
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_LIFECYCLE_HANDLERS = ("postStart", "preStop")
_ACTIONS = ("httpGet", "tcpSocket")


def _hosts(where: str, handler: object) -> list[tuple[str, str]]:
    if not isinstance(handler, dict):
        return []
    return [(f"{where}.{action}.host", host) for action in _ACTIONS
            if isinstance(handler.get(action), dict) and (host := as_string(handler[action].get("host")))]


def _host_fields(container: ContainerView) -> list[tuple[str, str]]:
    """(the path within the container, the host) for every host a probe or handler sets."""
    fields = container.fields
    found = [field for probe in _PROBES if probe in fields for field in _hosts(probe, fields[probe])]
    lifecycle = fields.get("lifecycle")
    if isinstance(lifecycle, dict):
        found += [field for name in _LIFECYCLE_HANDLERS if name in lifecycle
                  for field in _hosts(f"lifecycle.{name}", lifecycle[name])]
    return found


def host_probes_and_host_lifecycle_1_34(pod: PodView) -> CheckResult | None:
    containers: list[str] = []
    hosts: list[str] = []
    fixes: list[Fix] = []
    for container in pod.containers:
        found = _host_fields(container)
        if found:
            containers.append(container.name)
            hosts.extend(host for _, host in found)
            fixes.extend(Fix(container.name, f"{container.path}.{field}", '"", or unset',
                             f"remove {field} (the probe then reaches the pod's own IP)") for field, _ in found)
    if not containers:
        return None
    names, distinct_hosts = sorted_set(containers), sorted_set(hosts)
    return CheckResult(
        CHECK_ID, "probe or lifecycle host",
        f"{pluralize('container', 'containers', len(names))} {join_quote(names)} {pluralize('uses', 'use', len(names))} "
        f"{pluralize('probe or lifecycle host', 'probe or lifecycle hosts', len(distinct_hosts))} "
        f"{join_quote(distinct_hosts)}", tuple(fixes))


CHECK = Check(CHECK_ID, BASELINE, (VersionedCheck((1, 34), host_probes_and_host_lifecycle_1_34),))
