"""Kubernetes label selectors (``matchLabels`` + ``matchExpressions``), matched the way the API
server matches a ``namespaceSelector``."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# Set by the API server on every namespace (Kubernetes ≥ 1.21), so it is always known.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # one of OPERATORS
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        match self.operator:
            case "In":
                return labels.get(self.key) in self.values
            case "NotIn":  # like Kubernetes: a namespace without the label is "not in"
                return labels.get(self.key) not in self.values
            case "Exists":
                return self.key in labels
            case "DoesNotExist":
                return self.key not in labels
        raise ValueError(f"unknown label selector operator {self.operator!r}")


@dataclass(frozen=True)
class LabelSelector:
    """All requirements must hold; an empty selector matches every namespace."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and \
            all(r.matches(labels) for r in self.match_expressions)
