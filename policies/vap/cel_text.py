"""Writing CEL text: literals, guarded field reads and the Kubernetes CEL library calls the
exported policy uses. Every helper returns CEL source; nothing here evaluates anything.

Field reads are guarded with ``has()`` one level at a time: selecting an absent field is an
evaluation error in CEL, and an evaluation error makes the API server apply the policy's
failurePolicy instead of its answer.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

# The root an expression reads: ``object`` for the request, ``oldObject`` for the stored
# object on UPDATE. Every check is written once as a function of its root.
NEW = "object"
OLD = "oldObject"
# On UPDATE the API server always sets oldObject (on CREATE it is null).
UPDATE = "request.operation == 'UPDATE'"


def string(value: str) -> str:
    """A CEL string literal (single-quoted; backslash and quote escaped)."""
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"'{escaped}'"


def strings(values: Iterable[str]) -> str:
    return "[" + ", ".join(string(v) for v in values) + "]"


def integer(value: int) -> str:
    return str(int(value))


def present(root: str, *fields: str) -> str:
    """``has(root.a) && has(root.a.b) && …``: true when every field on the path is set."""
    checks, path = [], root
    for name in fields:
        path = f"{path}.{name}"
        checks.append(f"has({path})")
    return " && ".join(checks)


def select(root: str, *fields: str) -> str:
    return ".".join((root, *fields))


def key_present(map_expr: str, guard: str, key: str) -> str:
    """``guard && 'key' in map``: a map entry whose key is not a CEL identifier."""
    return f"{guard} && {string(key)} in {map_expr}"


def either(condition: str, then: str, otherwise: str) -> str:
    return f"({condition} ? {then} : {otherwise})"


def all_of(parts: Sequence[str]) -> str:
    parts = [p for p in parts if p and p != "true"]
    if not parts:
        return "true"
    return " && ".join(f"({p})" if len(parts) > 1 else p for p in parts)


def any_of(parts: Sequence[str]) -> str:
    parts = [p for p in parts if p and p != "false"]
    if not parts:
        return "false"
    return " || ".join(f"({p})" if len(parts) > 1 else p for p in parts)


def concat(*parts: str) -> str:
    """String concatenation of CEL expressions; plain text parts are passed as literals via
    ``text()``."""
    return " + ".join(parts)


def text(value: str) -> str:
    return string(value)


def as_string(expr: str) -> str:
    """``string(x)``: an int or a string (int-or-string fields) as the text the webhook shows."""
    return f"string({expr})"


# --- Kubernetes quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go) -------------
def is_quantity(value: str) -> str:
    """Whether an int-or-string value is a quantity; JSON numbers arrive as ints."""
    return f"isQuantity(string({value}))"


def quantity(value: str) -> str:
    return f"quantity(string({value}))"


def sign(q: str) -> str:
    """-1, 0 or 1. The API server declares ``sign`` a global function, ``sign(q)``, not a
    method (quantity.go's declaration; its doc comment says otherwise)."""
    return f"sign({q})"


def whole_and_not_negative(value: str) -> str:
    """A quantity with no fraction, within int64, and not below zero: how extended resources
    must be written."""
    q = quantity(value)
    return f"({is_quantity(value)} && {q}.isInteger() && {sign(q)} >= 0)"


def whole_amount(value: str) -> str:
    """The amount as an int; 0 for a value that is not a whole quantity of 0 or more (another
    check reports it, and the webhook counts it 0 too). Never an evaluation error."""
    q = quantity(value)
    return f"({whole_and_not_negative(value)} ? {q}.asInteger() : 0)"
