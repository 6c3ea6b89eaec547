"""The admin's policy: which settings apply in which namespace.

The core holds the defaults and the exempt namespaces; the policy file (with per-namespace
overrides) builds on this same object, so the webhook only ever asks ``settings_for``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from policies.settings import Settings

DEFAULT_EXEMPT_NAMESPACES = frozenset({"kube-system", "mpijob-webhook"})


@dataclass(frozen=True)
class Policy:
    settings: Settings = field(default_factory=Settings.defaults)
    exempt_namespaces: frozenset[str] = DEFAULT_EXEMPT_NAMESPACES

    def settings_for(self, namespace: str, labels: Mapping[str, str] | None = None) -> Settings | None:
        """The settings in force in ``namespace``; None when the namespace is exempt."""
        if namespace in self.exempt_namespaces:
            return None
        return self.settings
