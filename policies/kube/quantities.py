"""Kubernetes resource quantities, parsed as the API server does (Decimal, never float)."""
from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from typing import Any

from kubernetes.utils import parse_quantity

GPU_SUFFIX = "/gpu"


class BadQuantity(ValueError):
    pass


def quantity(value: Any) -> Decimal:
    """``1``, ``"500m"``, ``"4Gi"`` → Decimal. JSON numbers arrive as int; bools are not quantities."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadQuantity(f"{value!r} is not a quantity")
    try:
        return _parsed(value)
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
        return _parsed(value)
    except (ValueError, ArithmeticError):
        return None


# Every request and every cached quota, LimitRange and node repeats the same few quantities
# ("1", "4Gi", 8): parsing each once saves most of the resource rules' time. Decimals are
# immutable, so sharing them is safe; the bound keeps odd inputs from growing the cache.
@lru_cache(maxsize=4096)
def _parsed(value: int | str) -> Decimal:
    return parse_quantity(value)


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
