"""``hostPorts`` (baseline, 1.0+): no container port may set a ``hostPort`` other than 0."""
from __future__ import annotations

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix
from policies.kube.pod_security.go_strings import named, pluralize, sorted_set
from policies.kube.pod_security.level_versions import BASELINE
from policies.kube.pod_security.pod_fields import PodView, as_list, is_integer


def host_ports_1_0(pod: PodView) -> CheckResult | None:
    bad_containers: list[str] = []
    ports: list[str] = []
    fixes: list[Fix] = []
    for container in pod.containers:
        defaulted = pod.host_network_ports and container.kind != "ephemeralContainers"
        found = False
        for index, port in enumerate(as_list(container.fields.get("ports"))):
            if not isinstance(port, dict):
                continue
            host_port = port.get("hostPort")
            if is_integer(host_port) and host_port != 0:
                fixes.append(Fix(container.name, f"{container.path}.ports[{index}].hostPort", "0, or unset",
                                 f"remove ports[{index}].hostPort (a Service or the pod's IP reaches the port)"))
            elif defaulted and is_integer(host_port := port.get("containerPort")) and host_port != 0:
                fixes.append(Fix(container.name, "spec.hostNetwork", "false, or unset",
                                 f"remove spec.hostNetwork: with it, ports[{index}].containerPort {host_port} "
                                 "is a hostPort too"))
            else:
                continue
            found = True
            ports.append(str(host_port))
        if found:
            bad_containers.append(container.name)
    if not bad_containers:
        return None
    distinct = sorted_set(ports)    # sorted as strings, as upstream's sets.String: "10" before "9"
    return CheckResult(
        "hostPorts", "hostPort",
        f"{named('container', 'containers', bad_containers)} {pluralize('uses', 'use', len(bad_containers))} "
        f"{pluralize('hostPort', 'hostPorts', len(distinct))} {', '.join(distinct)}",
        tuple(fixes))


CHECK = Check("hostPorts", BASELINE, (VersionedCheck((1, 0), host_ports_1_0),))
