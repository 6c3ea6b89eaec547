"""A namespace's PodSecurity policy from its labels, as upstream's ``api.PolicyToEvaluate`` reads
them: the enforce, audit and warn levels and versions, the API server's defaults where a label is
missing, upstream's fallbacks where one is invalid (enforce: restricted; audit and warn: privileged;
a version: latest), and warn following a stricter enforce level that was set without a warn label."""
from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from policies.kube.pod_security.go_strings import go_quote
from policies.kube.pod_security.level_versions import (
    PRIVILEGED, RESTRICTED, LevelVersion, compare_levels, parse_level, parse_version)

LABEL_PREFIX = "pod-security.kubernetes.io/"
ENFORCE_LABEL = LABEL_PREFIX + "enforce"
ENFORCE_VERSION_LABEL = LABEL_PREFIX + "enforce-version"
AUDIT_LABEL = LABEL_PREFIX + "audit"
AUDIT_VERSION_LABEL = LABEL_PREFIX + "audit-version"
WARN_LABEL = LABEL_PREFIX + "warn"
WARN_VERSION_LABEL = LABEL_PREFIX + "warn-version"


class NamespacePolicy(NamedTuple):
    """Upstream's ``api.Policy``: what a namespace enforces, audits and warns about."""
    enforce: LevelVersion
    audit: LevelVersion
    warn: LevelVersion


# The API server's defaults when its admission configuration sets none: privileged:latest for all three.
PRIVILEGED_POLICY = NamespacePolicy(*(LevelVersion(PRIVILEGED, None),) * 3)


def _invalid(label: str, value: str, error: ValueError) -> str:
    """Upstream's ``field.Invalid(metadata.labels[label], value, error)`` as its Error() prints it."""
    return f"metadata.labels[{label}]: Invalid value: {go_quote(value)}: {error}"


def policy_to_evaluate(labels: Mapping[str, str],
                       defaults: NamespacePolicy = PRIVILEGED_POLICY) -> tuple[NamespacePolicy, list[str]]:
    """The policy the namespace's labels give, and one message per invalid label (upstream then
    still evaluates pods with the policy returned)."""
    errors: list[str] = []

    def level(label: str, fallback: str | None) -> str | None:
        value = labels.get(label)
        if value is None:
            return None
        value = value if isinstance(value, str) else str(value)
        try:
            return parse_level(value)
        except ValueError as error:
            errors.append(_invalid(label, value, error))
            return fallback

    def version(label: str) -> tuple[bool, tuple[int, int] | None]:
        value = labels.get(label)
        if value is None:
            return False, None
        value = value if isinstance(value, str) else str(value)
        try:
            return True, parse_version(value)
        except ValueError as error:
            errors.append(_invalid(label, value, error))
            return True, None

    enforce, audit, warn = defaults
    if not labels:
        return defaults, errors
    enforce_errors = len(errors)
    enforce_level = level(ENFORCE_LABEL, RESTRICTED)
    has_enforce_level = enforce_level is not None and len(errors) == enforce_errors
    if enforce_level is not None:
        enforce = enforce._replace(level=enforce_level)
    has_version, parsed = version(ENFORCE_VERSION_LABEL)
    if has_version:
        enforce = enforce._replace(version=parsed)
    if (audit_level := level(AUDIT_LABEL, PRIVILEGED)) is not None:      # fail open for audit
        audit = audit._replace(level=audit_level)
    has_version, parsed = version(AUDIT_VERSION_LABEL)
    if has_version:
        audit = audit._replace(version=parsed)
    has_warn_level = WARN_LABEL in labels
    if (warn_level := level(WARN_LABEL, PRIVILEGED)) is not None:        # fail open for warn
        warn = warn._replace(level=warn_level)
    has_warn_version, parsed = version(WARN_VERSION_LABEL)
    if has_warn_version:
        warn = warn._replace(version=parsed)
    # Warn at the enforce level when that was set explicitly and is the stricter one.
    if not has_warn_level and has_enforce_level and compare_levels(enforce.level, warn.level) > 0:
        warn = LevelVersion(enforce.level, warn.version if has_warn_version else enforce.version)
    return NamespacePolicy(enforce, audit, warn), errors
