"""The policy file as a whole: the document, its cluster-wide layer and its overrides, read into a
``Policy`` (the YAML, the parameters, the selectors and the JSON Schema each have a module of
their own in this package).

Nothing here is written by hand per rule. The accepted rule and mutation ids, their
parameters, the parameters' types and defaults all come from the registry (each rule's
``Params`` dataclass), so a new rule is configurable the moment it is registered.

A parameter is written in camelCase in the file (``maxPerWorker`` for the Params field
``max_per_worker``). A Params dataclass may validate itself in ``__post_init__`` (raise
``ValueError``, e.g. for a ``min`` above its ``max``); the message is reported at the
parameters' field path.

Every problem names its field path (``rules.worker-count.params.max``) and line, and an
unknown name comes with a "did you mean". Loading is all or nothing: a file with any problem
yields no policy at all.

File shape (every key optional; no file, an empty file → the built-in defaults)::

    apiVersion: mpijob-webhook/v1
    kind: Policy
    clusterUnavailable: warn            # warn | deny
    exemptNamespaces: [kube-system, mpijob-webhook, "openshift-*"]
    kueueUsernames: ["system:serviceaccount:kueue-system:kueue-controller-manager"]
    rules:
      worker-count: {action: deny, params: {max: 64}}
      image-reference: warn             # shorthand for {action: warn}
    mutations:
      istio-sidecar-off: {enabled: true}
      kueue-queue-label: false          # shorthand for {enabled: false}
    overrides:
      - name: research
        namespaceSelector: {matchLabels: {team: research}}
        rules: {gpus-per-worker: {params: {max: 16}}}
      - name: sandbox
        namespaces: [sandbox, "dev-*"]
        exempt: true
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.config.layered_policy import (
    DEFAULT_KUEUE_USERNAMES,
    DEFAULT_WEBHOOK_NAMESPACE,
    MutationPatch,
    Override,
    Policy,
    RulePatch,
    SettingsPatch,
)
from policies.config.namespace_selectors import _selector
from policies.config.parameters import _accepts_none, _construct_params, _convert, _kind_of, _params_fields, _show
from policies.config.problems import PolicyError, PolicyProblem, _check_keys, _child, _item, _Problems
from policies.config.rule_settings import Settings
from policies.config.yaml_reading import _read_yaml
from policies.interface import Action, Mutation, Rule
from policies.messages import did_you_mean

API_VERSION = "mpijob-webhook/v1"
KIND = "Policy"
CLUSTER_UNAVAILABLE_ACTIONS = (Action.WARN, Action.DENY)
_NAMESPACE_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$|^[a-z0-9][-a-z0-9]*\*$")


# --- the document ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Registry:
    rules: Mapping[str, Rule]
    mutations: Mapping[str, Mutation]


def _registry(rules: Sequence[Rule] | None, mutations: Sequence[Mutation] | None) -> _Registry:
    from policies.registry import MUTATIONS, RULES

    return _Registry({r.id: r for r in (RULES if rules is None else rules)},
                     {m.id: m for m in (MUTATIONS if mutations is None else mutations)})


def default_policy(own_namespace: str | None = None, *, rules: Sequence[Rule] | None = None,
                   mutations: Sequence[Mutation] | None = None) -> Policy:
    """The built-in policy: every rule at its default action, nothing overridden."""
    registry = _registry(rules, mutations)
    return Policy(settings=_defaults(registry), exempt_namespaces=_default_exempt(own_namespace))


def _default_exempt(own_namespace: str | None) -> frozenset[str]:
    return frozenset({"kube-system", own_namespace or DEFAULT_WEBHOOK_NAMESPACE})


def _defaults(registry: _Registry) -> Settings:
    from policies.registry import default_settings

    return default_settings(tuple(registry.rules.values()), tuple(registry.mutations.values()))


def parse_policy(text: str, *, source: str = "policy file", own_namespace: str | None = None,
                 rules: Sequence[Rule] | None = None, mutations: Sequence[Mutation] | None = None) -> Policy:
    """The policy written in ``text`` (YAML). Raises PolicyError listing every problem."""
    data, lines = _read_yaml(text, source)
    return policy_from_document(data, source=source, own_namespace=own_namespace, rules=rules,
                                mutations=mutations, lines=lines)


def policy_from_document(data: Any, *, source: str = "policy file", own_namespace: str | None = None,
                         rules: Sequence[Rule] | None = None, mutations: Sequence[Mutation] | None = None,
                         lines: Mapping[str, int] | None = None) -> Policy:
    registry = _registry(rules, mutations)
    problems = _Problems(lines or {})
    base = _defaults(registry)
    if data is None:
        return Policy(settings=base, exempt_namespaces=_default_exempt(own_namespace))
    if not isinstance(data, Mapping):
        raise PolicyError([PolicyProblem("", f"must be a mapping of policy settings, not {_kind_of(data)}")], source)
    reader = _Reader(registry, problems, base)
    _check_keys(data, "", _TOP_LEVEL_KEYS, problems)
    if "apiVersion" in data and data["apiVersion"] != API_VERSION:
        problems.add("apiVersion", f"unsupported value {_show(data['apiVersion'])}: must be {API_VERSION}")
    if "kind" in data and data["kind"] != KIND:
        problems.add("kind", f"unsupported value {_show(data['kind'])}: must be {KIND}")
    cluster_wide = reader.patch(data, "")
    settings = reader.apply(cluster_wide, base, "")
    exempt = _default_exempt(own_namespace)
    if "exemptNamespaces" in data:
        exempt = frozenset(_namespaces(data["exemptNamespaces"], "exemptNamespaces", problems, allow_empty=True))
        exempt |= {own_namespace} if own_namespace else frozenset()
    kueue_usernames = DEFAULT_KUEUE_USERNAMES
    if "kueueUsernames" in data:
        kueue_usernames = frozenset(_usernames(data["kueueUsernames"], "kueueUsernames", problems))
    overrides = reader.overrides(data.get("overrides"), settings)
    if problems.found:
        raise PolicyError(sorted(problems.found, key=lambda p: p.line or 0), source)
    return Policy(settings=settings, exempt_namespaces=exempt, kueue_usernames=kueue_usernames, overrides=overrides)


_TOP_LEVEL_KEYS = ("apiVersion", "kind", "clusterUnavailable", "exemptNamespaces", "kueueUsernames", "rules",
                   "mutations", "overrides")
_OVERRIDE_KEYS = ("name", "namespaces", "namespaceSelector", "exempt", "clusterUnavailable", "rules", "mutations")


def _namespaces(value: Any, path: str, problems: _Problems, *, allow_empty: bool) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.add(path, "must be a list of namespace names (a trailing * matches by prefix: \"openshift-*\")")
        return []
    if not value and not allow_empty:
        problems.add(path, "must name at least one namespace")
    for index, name in enumerate(value):
        if not _NAMESPACE_PATTERN.match(name) or len(name) > 63:
            problems.add(_item(path, index), f"{name!r} is not a namespace name (lowercase letters, digits and '-', "
                                             "at most 63 characters; a trailing * matches by prefix)")
    return value


def _usernames(value: Any, path: str, problems: _Problems) -> list[str]:
    """The usernames Kueue's controller is known by; an empty list trusts no one."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.add(path, "must be a list of usernames as the API server reports them in userInfo "
                           '(a ServiceAccount: "system:serviceaccount:<namespace>:<name>")')
        return []
    return value


class _Reader:
    def __init__(self, registry: _Registry, problems: _Problems, base: Settings) -> None:
        self.registry = registry
        self.problems = problems
        self.base = base

    # A layer: clusterUnavailable, rules, mutations (top level or one override).
    def patch(self, data: Mapping[str, Any], path: str) -> SettingsPatch:
        return SettingsPatch(
            rules=self._entries(data.get("rules"), _child(path, "rules"), "rule", self.registry.rules, self._rule),
            mutations=self._entries(data.get("mutations"), _child(path, "mutations"), "mutation",
                                    self.registry.mutations, self._mutation),
            cluster_unavailable=self._cluster_unavailable(data, path),
        )

    def apply(self, patch: SettingsPatch, settings: Settings, path: str) -> Settings:
        """``patch`` over ``settings``; a Params ``__post_init__`` refusing the result is a problem."""
        for rule_id, rule in patch.rules.items():
            if self._params_accepted(settings, "rules", rule_id, rule.params, path):
                settings = settings.with_rule(rule_id, action=rule.action, **rule.params)
        for mutation_id, mutation in patch.mutations.items():
            if self._params_accepted(settings, "mutations", mutation_id, mutation.params, path):
                settings = settings.with_mutation(mutation_id, enabled=mutation.enabled, **mutation.params)
        if patch.cluster_unavailable is not None:
            settings = dataclasses.replace(settings, cluster_unavailable=patch.cluster_unavailable)
        return settings

    def _params_accepted(self, settings: Settings, section: str, ident: str, params: Mapping[str, Any],
                         path: str) -> bool:
        """Whether ``params`` over the current ones build a valid Params (problems recorded if not)."""
        current = settings.params(ident)
        return _construct_params(type(current), params, _child(_child(_child(path, section), ident), "params"),
                                 self.problems, base=current) is not None

    def _cluster_unavailable(self, data: Mapping[str, Any], path: str) -> Action | None:
        if "clusterUnavailable" not in data:
            return None
        value = data["clusterUnavailable"]
        allowed = [a.value for a in CLUSTER_UNAVAILABLE_ACTIONS]
        if value not in allowed:
            self.problems.add(_child(path, "clusterUnavailable"),
                              f"unsupported value {_show(value)}: must be one of {', '.join(allowed)}"
                              f"{did_you_mean(str(value), allowed)}")
            return None
        return Action(value)

    def _entries(self, value: Any, path: str, noun: str, known: Mapping[str, Any],
                 read: Callable[[Any, Any, str], Any]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problems.add(path, f"must be a mapping of {noun} id to its settings, not {_kind_of(value)}")
            return {}
        entries = {}
        for ident, entry in value.items():
            entry_path = _child(path, ident)
            if ident not in known:
                self.problems.add(entry_path, f"unknown {noun} id {ident!r}{did_you_mean(str(ident), known)} "
                                              f"(known {noun}s: {', '.join(known) or 'none'})")
                continue
            patch = read(known[ident], entry, entry_path)
            if patch is not None:
                entries[ident] = patch
        return entries

    def _rule(self, rule: Rule, entry: Any, path: str) -> RulePatch | None:
        if isinstance(entry, str):  # shorthand: worker-count: warn
            entry = {"action": entry}
        if not isinstance(entry, Mapping):
            self.problems.add(path, f"must be an action ({', '.join(a.value for a in Action)}) "
                                    "or a mapping with action and params")
            return None
        _check_keys(entry, path, ("action", "params"), self.problems)
        action = None
        if "action" in entry:
            action = _convert(Action, entry["action"], _child(path, "action"), self.problems)
        return RulePatch(action, self._params(rule.Params, entry.get("params"), _child(path, "params")))

    def _mutation(self, mutation: Mutation, entry: Any, path: str) -> MutationPatch | None:
        if isinstance(entry, bool):  # shorthand: istio-sidecar-off: false
            entry = {"enabled": entry}
        if not isinstance(entry, Mapping):
            self.problems.add(path, "must be true, false or a mapping with enabled and params")
            return None
        _check_keys(entry, path, ("enabled", "params"), self.problems)
        enabled = None
        if "enabled" in entry:
            enabled = _convert(bool, entry["enabled"], _child(path, "enabled"), self.problems)
        return MutationPatch(enabled, self._params(mutation.Params, entry.get("params"), _child(path, "params")))

    def _params(self, params_type: type, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.problems.add(path, f"must be a mapping of parameter name to value, not {_kind_of(value)}")
            return {}
        given = _params_fields(params_type, value, path, self.problems)
        return {k: v for k, v in given.items() if v is not None or _accepts_none(params_type, k)}

    def overrides(self, value: Any, cluster_wide: Settings) -> tuple[Override, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            self.problems.add("overrides", f"must be a list of overrides, not {_kind_of(value)}")
            return ()
        overrides = []
        for index, entry in enumerate(value):
            override = self._override(entry, _item("overrides", index), cluster_wide)
            if override is not None:
                overrides.append(override)
        return tuple(overrides)

    def _override(self, entry: Any, path: str, cluster_wide: Settings) -> Override | None:
        if not isinstance(entry, Mapping):
            self.problems.add(path, "must be a mapping with namespaces or namespaceSelector")
            return None
        _check_keys(entry, path, _OVERRIDE_KEYS, self.problems)
        name = entry.get("name", path)
        if not isinstance(name, str):
            self.problems.add(_child(path, "name"), "must be a string")
            name = path
        has_names, has_selector = "namespaces" in entry, "namespaceSelector" in entry
        if has_names == has_selector:
            self.problems.add(path, "must have exactly one of namespaces (by name) or namespaceSelector (by label)")
            return None
        exempt = entry.get("exempt", False)
        if not isinstance(exempt, bool):
            self.problems.add(_child(path, "exempt"), f"must be true or false, not {_kind_of(exempt)} {_show(exempt)}")
        patch = self.patch(entry, path)
        self.apply(patch, cluster_wide, path)  # report what the Params refuse, against the cluster-wide values
        if has_names:
            names = _namespaces(entry["namespaces"], _child(path, "namespaces"), self.problems, allow_empty=False)
            return Override(name, namespaces=frozenset(names), patch=patch, exempt=exempt is True)
        selector = _selector(entry["namespaceSelector"], _child(path, "namespaceSelector"), self.problems)
        return Override(name, selector=selector, patch=patch, exempt=exempt is True)
