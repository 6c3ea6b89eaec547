"""Pod Security Standards, evaluated exactly as the API server's PodSecurity admission evaluates a
pod (upstream ``k8s.io/pod-security-admission``, its ``policy/`` checks and ``api/`` labels): every
check of ``baseline`` and ``restricted`` at every policy version, with upstream's texts, and for
every failure the places in the pod to fix. Pure: plain decoded JSON in, results out."""
from policies.kube.pod_security.check_registry import evaluate_pod, newest_policy_version
from policies.kube.pod_security.check_results import (
    CheckResult, Fix, forbidden_detail, forbidden_message, would_violate_message)
from policies.kube.pod_security.level_versions import (
    BASELINE, LATEST, LEVELS, PRIVILEGED, RESTRICTED, LevelVersion, compare_levels, parse_level, parse_version,
    version_text)
from policies.kube.pod_security.namespace_policy import (
    AUDIT_LABEL, AUDIT_VERSION_LABEL, ENFORCE_LABEL, ENFORCE_VERSION_LABEL, PRIVILEGED_POLICY, WARN_LABEL,
    WARN_VERSION_LABEL, NamespacePolicy, policy_to_evaluate)

__all__ = [
    "AUDIT_LABEL", "AUDIT_VERSION_LABEL", "ENFORCE_LABEL", "ENFORCE_VERSION_LABEL", "PRIVILEGED_POLICY", "WARN_LABEL",
    "WARN_VERSION_LABEL", "NamespacePolicy", "policy_to_evaluate",
    "BASELINE", "LATEST", "LEVELS", "PRIVILEGED", "RESTRICTED", "CheckResult", "Fix", "LevelVersion",
    "compare_levels", "evaluate_pod", "forbidden_detail", "forbidden_message", "newest_policy_version",
    "parse_level", "parse_version", "version_text", "would_violate_message",
]
