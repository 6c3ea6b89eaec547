"""The policy model the exporter reads, imported in one place: when its modules move, only
this file follows them."""
from __future__ import annotations

from policies.config import PolicyError
from policies.config.layered_policy import Override, Policy
from policies.config.reader import default_policy
from policies.config.rule_settings import Settings
from policies.interface import Action
from policies.kube.label_selectors import NAMESPACE_NAME_LABEL, LabelSelector, Requirement

__all__ = ["Action", "LabelSelector", "NAMESPACE_NAME_LABEL", "Override", "Policy", "PolicyError",
           "Requirement", "Settings", "default_policy"]
