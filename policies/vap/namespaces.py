"""Which settings are in force in the request's namespace, written as CEL.

The webhook resolves a namespace's settings in layers (``policies.policy``): the cluster-wide
settings, then the overrides that select namespaces by label (file order), then those that name
them (file order); an exempt namespace is never checked. Name patterns (``openshift-*``) and
label selectors cannot all be written as a binding's ``namespaceSelector`` (a selector has no
prefix match), so the exported policy reads the namespace itself (``request.namespace`` and
``namespaceObject``) and picks, for each rule, the action and every parameter from the same
layers: the strongest matching layer that sets a value wins, exactly as in the webhook.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from policies.vap import cel_text as cel
from policies.vap.policy_model import NAMESPACE_NAME_LABEL, LabelSelector, Override, Policy, Requirement

NAMESPACE = "request.namespace"
LABELS = "(has(namespaceObject.metadata) && has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : {})"
NAMESPACE_LABELS = "variables.namespaceLabels"


def names_match(patterns: Sequence[str]) -> str:
    """``namespace_matches``: exact names, or a prefix for a pattern ending in ``*``."""
    exact = sorted(p for p in patterns if not p.endswith("*"))
    prefixes = sorted(p[:-1] for p in patterns if p.endswith("*"))
    parts = []
    if exact:
        parts.append(f"{NAMESPACE} in {cel.strings(exact)}" if len(exact) > 1 else f"{NAMESPACE} == {cel.string(exact[0])}")
    parts += [f"{NAMESPACE}.startsWith({cel.string(p)})" for p in prefixes]
    return cel.any_of(parts)


def _label_value(key: str) -> tuple[str, str]:
    """(whether the label is set, its value): the name label is always the namespace's name,
    as the API server sets it (and the webhook assumes it)."""
    if key == NAMESPACE_NAME_LABEL:
        return "true", NAMESPACE
    return f"{cel.string(key)} in {NAMESPACE_LABELS}", f"{NAMESPACE_LABELS}[{cel.string(key)}]"


def _requirement(requirement: Requirement) -> str:
    is_set, value = _label_value(requirement.key)
    values = cel.strings(sorted(requirement.values))
    match requirement.operator:
        case "In":
            return cel.all_of([is_set, f"{value} in {values}"])
        case "NotIn":
            return f"!({cel.all_of([is_set, f'{value} in {values}'])})"
        case "Exists":
            return is_set
        case "DoesNotExist":
            return f"!({is_set})"
    raise ValueError(f"unknown label selector operator {requirement.operator!r}")


def selector_matches(selector: LabelSelector) -> str:
    parts = []
    for key, value in selector.match_labels:
        is_set, label = _label_value(key)
        parts.append(cel.all_of([is_set, f"{label} == {cel.string(value)}"]))
    parts += [_requirement(r) for r in selector.match_expressions]
    return cel.all_of(parts)


def override_matches(override: Override) -> str:
    if override.selector is not None:
        return selector_matches(override.selector)
    return names_match(sorted(override.namespaces))


def reads_labels(policy: Policy) -> bool:
    """Whether any override selects by a label other than the namespace's name."""
    for override in policy.overrides:
        if override.selector is None:
            continue
        keys = [k for k, _ in override.selector.match_labels] + [r.key for r in override.selector.match_expressions]
        if any(k != NAMESPACE_NAME_LABEL for k in keys):
            return True
    return False


def in_precedence_order(policy: Policy) -> list[Override]:
    """Weakest first: label overrides in file order, then name overrides in file order."""
    return sorted(policy.overrides, key=lambda o: o.by_name)


def exempt(policy: Policy) -> str:
    """CEL: the namespace is never checked (exemptNamespaces, or a matching exempt override)."""
    parts = [names_match(sorted(policy.exempt_namespaces))] if policy.exempt_namespaces else []
    parts += [override_matches(o) for o in policy.overrides if o.exempt]
    return cel.any_of(parts)


def layered(policy: Policy, base: Any, value_of: Callable[[Override], Any | None], literal: Callable[[Any], str]) -> str:
    """CEL for a setting whose value may differ per namespace: the strongest matching override
    that sets it (``value_of`` not None), else ``base``. Equal neighbours collapse, so a value
    no override changes is a plain literal."""
    expression = literal(base)
    for override in in_precedence_order(policy):
        value = value_of(override)
        if value is None:
            continue
        written = literal(value)
        if written != expression:
            expression = f"({override_matches(override)} ? {written} : {expression})"
    return expression


def possible_values(policy: Policy, base: Any, value_of: Callable[[Override], Any | None]) -> list[Any]:
    """Every value a setting can take in some namespace, base first (order kept, no repeats)."""
    values = [base]
    for override in in_precedence_order(policy):
        value = value_of(override)
        if value is not None and value not in values:
            values.append(value)
    return values
