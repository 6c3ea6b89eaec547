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


def _se_linux_options(allowed_types: frozenset[str]) -> Callable[[PodView], CheckResult | None]:
    type_allowed = ", ".join(sorted(allowed_types - {""})) + ", or unset"

    def check(pod: PodView) -> CheckResult | None:
        bad_types: list[str] = []
        set_user = set_role = False
        fixes: list[Fix] = []

        def invalid(context: Mapping[str, Any] | None, container: str | None, path: str, where: str) -> bool:
            nonlocal set_user, set_role
            options = None if context is None else context.get("seLinuxOptions")
            if not isinstance(options, Mapping):
                return False
            found = False
            selinux_type = as_string(options.get("type"))
            if selinux_type not in allowed_types:
                bad_types.append(selinux_type)
                fixes.append(Fix(container, f"{path}.securityContext.seLinuxOptions.type", type_allowed,
                                 f"{where}set securityContext.seLinuxOptions.type to one of {type_allowed}"))
                found = True
            for key in ("user", "role"):
                if as_string(options.get(key)):
                    fixes.append(Fix(container, f"{path}.securityContext.seLinuxOptions.{key}", "unset",
                                     f"{where}remove securityContext.seLinuxOptions.{key}"))
                    found = True
                    if key == "user":
                        set_user = True
                    else:
                        set_role = True
            return found

        setters = ["pod"] if invalid(pod.security_context, None, "spec", "in the pod spec, ") else []
        bad = [c.name for c in pod.containers if invalid(c.security_context, c.name, c.path, "")]
        if bad:
            setters.append(named("container", "containers", bad))
        if not setters:
            return None
        data = []
        if bad_types:
            data.append(named("type", "types", sorted_set(bad_types)))
        if set_user:
            data.append("user may not be set")
        if set_role:
            data.append("role may not be set")
        return CheckResult(
            CHECK_ID, "seLinuxOptions",
            f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}", tuple(fixes))
    return check


CHECK = Check(CHECK_ID, BASELINE, (
    VersionedCheck((1, 0), _se_linux_options(TYPES_1_0)),
    VersionedCheck((1, 31), _se_linux_options(TYPES_1_31)),
))
