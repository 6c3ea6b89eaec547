"""The policy model the exporter reads, imported in one place: the modules it comes from are
being reorganised, and only this file needs to follow them."""
from __future__ import annotations

from policies.base import Action
from policies.config import PolicyError, default_policy
from policies.policy import Override, Policy
from policies.selector import NAMESPACE_NAME_LABEL, LabelSelector, Requirement
from policies.settings import Settings

__all__ = ["Action", "LabelSelector", "NAMESPACE_NAME_LABEL", "Override", "Policy", "PolicyError",
           "Requirement", "Settings", "default_policy"]
