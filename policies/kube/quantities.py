"""Kubernetes resource quantities, parsed as the API server does (Decimal, never float)."""
from __future__ import annotations

from decimal import Decimal, DecimalException, InvalidOperation
from typing import Any

GPU_SUFFIX = "/gpu"


class BadQuantity(ValueError):
    pass


# The suffixes ``kubernetes.utils.parse_quantity`` knows, each with what it multiplies by, made
# once as that function makes it on every call (``base ** Decimal(exponent)``, an arbitrary
# precision power: most of its cost; docs/performance.md, "The view and the quantities").
_EXPONENTS = {"n": -3, "u": -2, "m": -1, "K": 1, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_MULTIPLIERS = {suffix: 1000 ** Decimal(exponent) for suffix, exponent in _EXPONENTS.items()}
_MULTIPLIERS.update({f"{prefix}i": 1024 ** Decimal(_EXPONENTS[prefix]) for prefix in "KMGTPE"})


def parse_quantity(value: Any) -> Decimal:
    """What ``kubernetes.utils.parse_quantity`` answers: the same Decimal, digit for digit, and a
    ValueError (with its message) for what it refuses
    (tests/policies/test_quantities.py holds it to that library over generated quantities).

    As that function does: a last ``i`` after a suffix letter makes a binary suffix (``Ki`` …
    ``Ei``; ``ki``, ``mi`` … are refused), a last suffix letter a decimal one, and the number
    before it is whatever ``Decimal`` reads (signs, exponents, ``Infinity``, ``NaN``, underscores,
    surrounding spaces); the product is rounded in the thread's decimal context."""
    kind = type(value)
    if kind is int:
        return Decimal(value)
    if kind is str:
        text = value
    elif isinstance(value, (int, float, Decimal)):  # as that function: any number as it is (bools too)
        return Decimal(value)
    else:
        text = str(value)
    last = text[-1:]
    suffix = ""
    if last == "i":
        if len(text) >= 2 and text[-2] in _EXPONENTS:
            suffix = text[-2:]
    elif last in _EXPONENTS:
        suffix = last
    number = text[:-len(suffix)] if suffix else text
    try:
        parsed = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"Invalid number format: {number}") from None
    if not suffix:
        return parsed
    multiplier = _MULTIPLIERS.get(suffix)
    if multiplier is None:
        raise ValueError(f"{text} has unknown suffix")
    try:
        return parsed * multiplier
    except DecimalException as exc:
        raise ValueError(f"Invalid quantity: {text}") from exc


def quantity(value: Any) -> Decimal:
    """``1``, ``"500m"``, ``"4Gi"`` → Decimal. JSON numbers arrive as int; bools are not quantities."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadQuantity(f"{value!r} is not a quantity")
    try:
        return parse_quantity(value)
    except (ValueError, ArithmeticError) as exc:
        raise BadQuantity(f"{value!r} is not a quantity (e.g. 2, \"500m\", \"4Gi\")") from exc


def quantity_or_none(value: Any) -> Decimal | None:
    """``quantity(value)``, or None for what is not a quantity: for maps of quantities, where
    entries that do not parse are left out. The JSON types first, as they are all that come."""
    kind = type(value)
    if kind is not str and kind is not int:
        try:
            return quantity(value)
        except BadQuantity:
            return None
    try:
        return parse_quantity(value)
    except (ValueError, ArithmeticError):
        return None


def is_gpu(resource: str) -> bool:
    """Any vendor's GPU extended resource: nvidia.com/gpu, amd.com/gpu, intel.com/gpu, …"""
    return resource.endswith(GPU_SUFFIX) and "/" in resource


def is_extended(resource: str) -> bool:
    """Extended resources (domain-qualified, outside kubernetes.io) need requests == limits."""
    if "/" not in resource:
        return False
    domain = resource.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io")) and not resource.startswith("requests.")


def format_quantity(value: Decimal, resource: str = "") -> str:
    """A Decimal back in a form people read: whole numbers bare, memory in Gi/Mi when exact."""
    if resource.endswith("memory") or resource.endswith("ephemeral-storage"):
        for suffix, size in (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
            if value >= size and value % size == 0:
                return f"{int(value // size)}{suffix}"
    if value == value.to_integral_value():
        return str(int(value))
    if resource.endswith("cpu") and (value * 1000) == (value * 1000).to_integral_value():
        return f"{int(value * 1000)}m"
    return format(value.normalize(), "f")
