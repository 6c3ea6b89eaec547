"""What a failed check reports (upstream's ``CheckResult``, plus the places to fix), and the
aggregated text the API server prints for a pod its PodSecurity admission refuses or warns about
(``AggregateCheckResult.ForbiddenDetail`` inside ``violates PodSecurity "level:version": …``)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from policies.kube.pod_security.go_strings import go_quote
from policies.kube.pod_security.level_versions import LevelVersion

# Upstream's placeholder for a check that disallows without a reason (none of its checks does).
UNKNOWN_FORBIDDEN_REASON = "unknown forbidden reason"


class Fix(NamedTuple):
    """One offending place, for a precise user message."""
    container: str | None   # the container's name; None for the pod itself (its spec or annotations)
    field: str              # the path within the pod template: "spec.containers[0].securityContext.privileged"
    allowed: str            # what is allowed there: "false"
    write: str              # what to write instead: "set securityContext.privileged: false, or remove it"


class CheckResult(NamedTuple):
    """One upstream check that the pod fails, with upstream's texts exactly."""
    check_id: str           # upstream's check ID: "allowPrivilegeEscalation"
    forbidden_reason: str   # "allowPrivilegeEscalation != false"
    forbidden_detail: str   # 'container "app" must set securityContext.allowPrivilegeEscalation=false'
    fixes: tuple[Fix, ...]


def forbidden_detail(results: Sequence[CheckResult]) -> str:
    """Upstream's ``ForbiddenDetail``: every reason, its detail (when it has one) in parentheses."""
    parts = []
    for result in results:
        reason = result.forbidden_reason or UNKNOWN_FORBIDDEN_REASON
        parts.append(f"{reason} ({result.forbidden_detail})" if result.forbidden_detail else reason)
    return ", ".join(parts)


def forbidden_message(level_version: LevelVersion, results: Sequence[CheckResult]) -> str:
    """The reason the API server gives when the enforce level refuses a pod:
    ``violates PodSecurity "restricted:latest": privileged (container "app" must not set …), …``.
    The API server puts ``pods "NAME" is forbidden: `` before it."""
    return f"violates PodSecurity {go_quote(str(level_version))}: {forbidden_detail(results)}"


def would_violate_message(level_version: LevelVersion, results: Sequence[CheckResult]) -> str:
    """The API server's warning (warn label) and audit annotation (audit label) for the same
    findings: ``would violate PodSecurity "restricted:latest": …``."""
    return f"would violate PodSecurity {go_quote(str(level_version))}: {forbidden_detail(results)}"


def for_the_pod(write: str) -> str:
    """A container's "set securityContext.x …" said of the pod: "set spec.securityContext.x …"."""
    return write.replace("securityContext.", "spec.securityContext.", 1)
