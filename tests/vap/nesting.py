"""Finds comprehensions (all, exists, map, filter, exists_one) nested inside another whose
range does not come from the enclosing element: a walk over the job inside a walk over the
job, whose cost is the product of two sizes."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

MACROS = {"all", "exists", "exists_one", "map", "filter"}


def _identifiers(tree: Any) -> set[str]:
    return {str(node.children[0]) for node in tree.iter_subtrees() if node.data == "ident"}


def _macro(node: Any) -> tuple[Any, str, Any] | None:
    """(range, iteration variable, body) of a comprehension node."""
    if getattr(node, "data", None) != "member_dot_arg" or len(node.children) < 3:
        return None
    member, method, arguments = node.children[:3]
    if str(method) not in MACROS or arguments is None or len(arguments.children) != 2:
        return None
    variable, body = arguments.children
    names = _identifiers(variable)
    return member, next(iter(names)) if names else "", body


def nested_walks(tree: Any, enclosing: tuple[str, ...] = ()) -> list[str]:
    found = []
    macro = _macro(tree)
    if macro is not None:
        member, variable, body = macro
        if enclosing and not (_identifiers(member) & set(enclosing)):
            found.append(f"a walk inside the walk over {enclosing[-1]} does not start from it")
        found += nested_walks(member, enclosing)
        found += nested_walks(body, (*enclosing, variable))
        return found
    for child in getattr(tree, "children", ()):
        found += nested_walks(child, enclosing)
    return found


def policy_expressions(objects: list[Mapping[str, Any]]) -> Iterator[tuple[str, str]]:
    """(policy name, expression) for every variable, validation and message expression of the
    ValidatingAdmissionPolicies among ``objects``."""
    for policy in objects:
        if policy["kind"] != "ValidatingAdmissionPolicy":
            continue
        spec = policy["spec"]
        expressions = [v["expression"] for v in spec["variables"]]
        expressions += [e for v in spec["validations"] for e in (v["expression"], v["messageExpression"])]
        for expression in expressions:
            yield policy["metadata"]["name"], expression
