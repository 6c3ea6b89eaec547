"""The admin's policy: which settings apply in which namespace.

Precedence, from weakest to strongest:

1. the built-in defaults of every rule and mutation;
2. the cluster-wide part of the policy file;
3. overrides that select namespaces by label (``namespaceSelector``), in file order;
4. overrides that name namespaces (``namespaces``), in file order.

A later layer changes only what it sets: parameters merge field by field, so an override that
sets ``max`` keeps the ``min`` in force. An exempt namespace (``exemptNamespaces``, or any
matching override with ``exempt: true``) is never checked, whatever else matches.

``policies.config`` builds this object from the policy file; the webhook only ever asks
``settings_for``.
"""
from __future__ import annotations

import fnmatch
import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from policies.interface import Action
from policies.kube.label_selectors import NAMESPACE_NAME_LABEL, LabelSelector
from policies.config.rule_settings import Settings

log = logging.getLogger(__name__)

DEFAULT_WEBHOOK_NAMESPACE = "mpijob-webhook"
DEFAULT_EXEMPT_NAMESPACES = frozenset({"kube-system", DEFAULT_WEBHOOK_NAMESPACE})
# Who Kueue's controller sends its requests as (userInfo.username): upstream Kueue's manifests
# and the Red Hat build of Kueue operator (its operand runs in openshift-kueue-operator). Only
# requests from these may admit or stop a TrainJob without its change being checked.
DEFAULT_KUEUE_USERNAMES = frozenset({
    "system:serviceaccount:kueue-system:kueue-controller-manager",
    "system:serviceaccount:openshift-kueue-operator:kueue-controller-manager",
})
# Namespaces whose settings a policy keeps at hand; beyond, the least recently asked are worked
# out again.
NAMESPACES_REMEMBERED = 4096


def namespace_matches(patterns: Iterable[str], namespace: str) -> bool:
    """Names match exactly; a pattern ending in ``*`` matches by prefix (``openshift-*``)."""
    return any(fnmatch.fnmatchcase(namespace, p) if p.endswith("*") else namespace == p for p in patterns)


@dataclass(frozen=True)
class RulePatch:
    action: Action | None = None
    params: Mapping[str, Any] = field(default_factory=dict)  # Params field name → value


@dataclass(frozen=True)
class MutationPatch:
    enabled: bool | None = None
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SettingsPatch:
    """What one layer of the policy changes; everything it leaves out stays as it was."""

    rules: Mapping[str, RulePatch] = field(default_factory=dict)
    mutations: Mapping[str, MutationPatch] = field(default_factory=dict)
    cluster_unavailable: Action | None = None

    def apply(self, settings: Settings) -> Settings:
        for rule_id, rule in self.rules.items():
            settings = settings.with_rule(rule_id, action=rule.action, **rule.params)
        for mutation_id, mutation in self.mutations.items():
            settings = settings.with_mutation(mutation_id, enabled=mutation.enabled, **mutation.params)
        if self.cluster_unavailable is not None:
            settings = replace(settings, cluster_unavailable=self.cluster_unavailable)
        return settings


@dataclass(frozen=True)
class Override:
    """Settings for some namespaces: by name (``namespaces``) or by label (``selector``)."""

    name: str
    namespaces: frozenset[str] = frozenset()
    selector: LabelSelector | None = None
    patch: SettingsPatch = SettingsPatch()
    exempt: bool = False

    @property
    def by_name(self) -> bool:
        return self.selector is None

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.selector is not None:
            return self.selector.matches(labels)
        return namespace_matches(self.namespaces, namespace)


def _registry_defaults() -> Settings:
    from policies.registry import default_settings  # the registry imports every rule: only when needed

    return default_settings()


@dataclass(frozen=True)
class Policy:
    settings: Settings = field(default_factory=_registry_defaults)
    exempt_namespaces: frozenset[str] = DEFAULT_EXEMPT_NAMESPACES
    kueue_usernames: frozenset[str] = DEFAULT_KUEUE_USERNAMES
    overrides: tuple[Override, ...] = ()
    # Settings per set of matching overrides: only a handful of distinct sets ever occur.
    _resolved: dict[tuple[int, ...], Settings] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    # The answer per namespace and its labels, worked out once for this policy: matching every
    # override's patterns and selectors again costs more than the rules of most requests.
    _answers: Callable[[str, tuple[tuple[str, str], ...]], Settings | None] = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        answers = functools.lru_cache(maxsize=NAMESPACES_REMEMBERED)(
            lambda namespace, labels: self._answer(namespace, dict(labels)))
        object.__setattr__(self, "_answers", answers)

    def with_cluster_unavailable(self, action: Action) -> Policy:
        """The same policy with one answer for unavailable cluster state in every namespace
        (the offline checker reports skipped cluster rules instead of warning about them)."""
        return replace(
            self,
            settings=replace(self.settings, cluster_unavailable=action),
            overrides=tuple(replace(o, patch=replace(o.patch, cluster_unavailable=None)) for o in self.overrides),
        )

    def applicable_overrides(self, namespace: str, labels: Mapping[str, str] | None = None) -> tuple[Override, ...]:
        """The overrides that apply in ``namespace``, weakest first (the last one wins)."""
        return tuple(self.overrides[i] for i in self._applicable(namespace, labels))

    def is_exempt(self, namespace: str, labels: Mapping[str, str] | None = None) -> bool:
        return self.settings_for(namespace, labels) is None

    def settings_for(self, namespace: str, labels: Mapping[str, str] | None = None) -> Settings | None:
        """The settings in force in ``namespace``; None when the namespace is exempt."""
        try:
            return self._answers(namespace, tuple(labels.items()) if labels else ())
        except TypeError:  # a label value that cannot be a key: never one from the API server
            return self._answer(namespace, labels)

    def _answer(self, namespace: str, labels: Mapping[str, str] | None) -> Settings | None:
        if namespace_matches(self.exempt_namespaces, namespace):
            return None
        indexes = self._applicable(namespace, labels)
        if any(self.overrides[i].exempt for i in indexes):
            return None
        resolved = self._resolved.get(indexes)
        if resolved is None:
            resolved = self._resolved[indexes] = self._layer(indexes)
        return resolved

    def _applicable(self, namespace: str, labels: Mapping[str, str] | None) -> tuple[int, ...]:
        known = {**(labels or {}), NAMESPACE_NAME_LABEL: namespace}
        matching = [i for i, o in enumerate(self.overrides) if o.matches(namespace, known)]
        # sorted() is stable: label overrides first, then name overrides, each in file order.
        return tuple(sorted(matching, key=lambda i: self.overrides[i].by_name))

    def _layer(self, indexes: tuple[int, ...]) -> Settings:
        settings = self.settings
        for i in indexes:
            override = self.overrides[i]
            try:
                settings = override.patch.apply(settings)
            except (TypeError, ValueError) as exc:
                # Each override was checked against the cluster-wide settings when the file was
                # loaded; only a combination of several can still clash (a min above a max).
                log.error("policy override %s was not applied in combination with %s: %s",
                          override.name, ", ".join(self.overrides[j].name for j in indexes if j != i), exc)
        return settings
