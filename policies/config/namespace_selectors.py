"""An override's ``namespaceSelector`` from YAML to a ``LabelSelector``, with the API server's
checks of label keys, values and operators."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from policies.config.parameters import _show
from policies.config.problems import _check_keys, _child, _item, _Problems
from policies.kube.label_selectors import OPERATORS, LabelSelector, Requirement
from policies.messages import did_you_mean

_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _selector(value: Any, path: str, problems: _Problems) -> LabelSelector:
    if not isinstance(value, Mapping):
        problems.add(path, "must be a label selector: a mapping with matchLabels and/or matchExpressions")
        return LabelSelector()
    _check_keys(value, path, ("matchLabels", "matchExpressions"), problems)
    labels: list[tuple[str, str]] = []
    match_labels = value.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        problems.add(_child(path, "matchLabels"), "must be a mapping of label key to value")
        match_labels = {}
    for key, label in match_labels.items():
        label_path = _child(_child(path, "matchLabels"), key)
        _label_key(key, label_path, problems)
        if not isinstance(label, str):
            problems.add(label_path, f"label values are strings: quote it (\"{_show(label)}\")")
        elif not _LABEL_VALUE.match(label) or len(label) > 63:
            problems.add(label_path, f"{label!r} is not a valid label value")
        else:
            labels.append((key, label))
    expressions = value.get("matchExpressions") or []
    requirements = []
    if not isinstance(expressions, list):
        problems.add(_child(path, "matchExpressions"), "must be a list of {key, operator, values}")
        expressions = []
    for index, expression in enumerate(expressions):
        requirement = _requirement(expression, _item(_child(path, "matchExpressions"), index), problems)
        if requirement is not None:
            requirements.append(requirement)
    return LabelSelector(tuple(labels), tuple(requirements))


def _label_key(key: str, path: str, problems: _Problems) -> None:
    if not _LABEL_KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        problems.add(path, f"{key!r} is not a valid label key")


def _requirement(value: Any, path: str, problems: _Problems) -> Requirement | None:
    if not isinstance(value, Mapping):
        problems.add(path, "must be a mapping with key, operator and values")
        return None
    _check_keys(value, path, ("key", "operator", "values"), problems)
    key, operator, values = value.get("key"), value.get("operator"), value.get("values")
    if not isinstance(key, str):
        problems.add(_child(path, "key"), "is required: the label key to test")
        return None
    _label_key(key, _child(path, "key"), problems)
    if operator not in OPERATORS:
        problems.add(_child(path, "operator"), f"unsupported value {_show(operator)}: must be one of "
                                               f"{', '.join(OPERATORS)}{did_you_mean(str(operator), OPERATORS)}")
        return None
    if operator in ("In", "NotIn"):
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            problems.add(_child(path, "values"), f"{operator} needs a non-empty list of string values")
            return None
    elif values:
        problems.add(_child(path, "values"), f"{operator} takes no values")
        return None
    return Requirement(key, operator, frozenset(values or ()))
