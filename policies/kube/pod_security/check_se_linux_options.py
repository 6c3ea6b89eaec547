"""``seLinuxOptions`` (baseline, 1.0+): the SELinux type may only be a container type
(``container_engine_t`` too from 1.31), and user and role may not be set."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from policies.kube.pod_security.check_registry import Check, VersionedCheck
from policies.kube.pod_security.check_results import CheckResult, Fix
from policies.kube.pod_security.go_strings import named, sorted_set
from policies.kube.pod_security.level_versions import BASELINE
from policies.kube.pod_security.pod_fields import PodView, as_string

CHECK_ID = "seLinuxOptions"
TYPES_1_0 = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
TYPES_1_31 = TYPES_1_0 | {"container_engine_t"}


def _forbidden_options(context: Mapping[str, Any] | None, allowed_types: frozenset[str]) -> tuple[list[str], str]:
    """The seLinuxOptions keys a securityContext sets to a forbidden value (in upstream's order),
    and the type it sets."""
    options = None if context is None else context.get("seLinuxOptions")
    if not isinstance(options, dict):
        return [], ""
    selinux_type = as_string(options.get("type"))
    forbidden = ["type"] if selinux_type not in allowed_types else []
    return forbidden + [key for key in ("user", "role") if as_string(options.get(key))], selinux_type


def _se_linux_options(allowed_types: frozenset[str]) -> Callable[[PodView], CheckResult | None]:
    type_allowed = ", ".join(sorted(allowed_types - {""})) + ", or unset"

    def fix(container: str | None, path: str, key: str) -> Fix:
        field = f"securityContext.seLinuxOptions.{key}"
        scope = "spec." if container is None else ""
        if key == "type":
            return Fix(container, f"{path}.{field}", type_allowed, f"set {scope}{field} to one of {type_allowed}")
        return Fix(container, f"{path}.{field}", "unset", f"remove {scope}{field}")

    def check(pod: PodView) -> CheckResult | None:
        setters: list[str] = []
        fixes: list[Fix] = []
        bad_types: list[str] = []
        forbidden_keys: set[str] = set()
        places = [(None, "spec", pod.security_context)] + [(c.name, c.path, c.security_context) for c in pod.containers]
        bad_containers = []
        for container, path, context in places:
            keys, selinux_type = _forbidden_options(context, allowed_types)
            if not keys:
                continue
            if container is None:
                setters.append("pod")
            else:
                bad_containers.append(container)
            if "type" in keys:
                bad_types.append(selinux_type)
            forbidden_keys.update(keys)
            fixes.extend(fix(container, path, key) for key in keys)
        if bad_containers:
            setters.append(named("container", "containers", bad_containers))
        if not setters:
            return None
        data = [named("type", "types", sorted_set(bad_types))] if bad_types else []
        data += [f"{key} may not be set" for key in ("user", "role") if key in forbidden_keys]
        return CheckResult(
            CHECK_ID, "seLinuxOptions",
            f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}", tuple(fixes))
    return check


CHECK = Check(CHECK_ID, BASELINE, (
    VersionedCheck((1, 0), _se_linux_options(TYPES_1_0)),
    VersionedCheck((1, 31), _se_linux_options(TYPES_1_31)),
))
