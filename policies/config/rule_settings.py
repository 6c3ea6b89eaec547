"""The one settings object: per rule an action and typed parameters, per mutation on/off and
parameters, plus the few engine-wide switches.

Each rule and mutation declares its own ``Params`` dataclass (with the defaults); this module
only holds them together. ``policies.registry.default_settings()`` is the embedded policy the webhook serves
with when the admin gives none.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from policies.interface import Action


@dataclass(frozen=True)
class RuleConfig:
    action: Action
    params: Any


@dataclass(frozen=True)
class MutationConfig:
    enabled: bool
    params: Any


@dataclass(frozen=True)
class Settings:
    rules: Mapping[str, RuleConfig]
    mutations: Mapping[str, MutationConfig]
    # What happens to cluster-aware rules when the caches are not usable: WARN lets the job
    # through with a warning that they were skipped, DENY refuses it (fail closed).
    cluster_unavailable: Action = Action.WARN
    extra: Mapping[str, Any] = field(default_factory=dict)

    def params(self, ident: str) -> Any:
        if ident in self.rules:
            return self.rules[ident].params
        return self.mutations[ident].params

    def action(self, rule_id: str) -> Action:
        return self.rules[rule_id].action

    def enabled(self, mutation_id: str) -> bool:
        return self.mutations[mutation_id].enabled

    def with_rule(self, rule_id: str, *, action: Action | None = None, **params: Any) -> Settings:
        """A copy with one rule changed; for tests and for policy overrides."""
        current = self.rules[rule_id]
        changed = RuleConfig(action or current.action, replace(current.params, **params))
        return replace(self, rules={**self.rules, rule_id: changed})

    def with_mutation(self, mutation_id: str, *, enabled: bool | None = None, **params: Any) -> Settings:
        current = self.mutations[mutation_id]
        changed = MutationConfig(
            current.enabled if enabled is None else enabled, replace(current.params, **params)
        )
        return replace(self, mutations={**self.mutations, mutation_id: changed})
