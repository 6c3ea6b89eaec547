"""The shape check before the mutations: the types of the fields they read and write, nothing else.

Each mutation declares those fields (``fields``: paths of map keys from the object's root) and
the check is derived from the declarations of the mutations that run, against the part of the
CRD schema that covers them (``policies.mpijob.crd_type_check.fields_check``). A field elsewhere of the wrong
type (a container given as a string) is not the mutations' concern: they never read it, and
the API server's schema validation and the validating webhook refuse it with its path. A
mutation that declares nothing gets the whole object checked, so a forgotten declaration costs
time, never safety.

Only type problems are reported: a missing map is created by the mutation that writes into it,
and a missing required field is left to validation.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from policies.interface import Finding, Mutation
from policies.mpijob.crd_type_check import FieldPath, check_shape, fields_check


def check_mutation_shape(job: Any, mutations: Sequence[Mutation]) -> list[Finding]:
    """The type problems of ``job`` in the fields ``mutations`` read or write."""
    return _shape_check(mutations)(job)


def declared_fields(mutations: Sequence[Mutation]) -> tuple[FieldPath, ...] | None:
    """Every field the mutations declare; None when one of them declares none."""
    fields: list[FieldPath] = []
    for mutation in mutations:
        declared = getattr(mutation, "fields", None)
        if declared is None:
            return None
        fields += declared
    return tuple(fields)


# The check for each list of mutations the engine was given (the registry's, or a test's), by
# the identities of the mutations, which it holds: a mutation need not be hashable.
_CHECKS: dict[tuple[int, ...], tuple[tuple[Mutation, ...], Callable[[Any], list[Finding]]]] = {}
_MOST_CHECKS = 16


def _shape_check(mutations: Sequence[Mutation]) -> Callable[[Any], list[Finding]]:
    key = tuple(map(id, mutations))
    known = _CHECKS.get(key)
    if known is None:
        if len(_CHECKS) >= _MOST_CHECKS:
            _CHECKS.clear()
        fields = declared_fields(mutations)
        known = _CHECKS[key] = (tuple(mutations), check_shape if fields is None else fields_check(fields))
    return known[1]
