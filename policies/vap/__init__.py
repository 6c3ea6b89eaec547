"""The webhook's static rules as Kubernetes ValidatingAdmissionPolicies (CEL evaluated inside
the API server), generated from the same policy file: ``objects(policy)``.

Pure: builds dicts of CEL text, evaluates nothing, imports nothing of the webhook's runtime.
"""
from policies.vap.policy_objects import DEFAULT_PREFIX, EXPORTED_RULES, KINDS, ExportedRule, export, objects

__all__ = ["DEFAULT_PREFIX", "EXPORTED_RULES", "KINDS", "ExportedRule", "export", "objects"]
