"""The Kubernetes CEL libraries the exported policy calls, for cel-python, following the API
server's semantics (k8s.io/apiserver/pkg/cel/library: quantity.go, lists.go; cel-go ext
strings):

- quantities: ``isQuantity``, ``quantity``, ``sign``, and on a quantity ``isInteger``,
  ``asInteger``, ``asApproximateFloat``, ``compareTo``, ``isGreaterThan``, ``isLessThan`` (of
  another quantity), ``add``, ``sub`` (a quantity or an int);
- lists: ``sum``, ``max``, ``min``, ``indexOf``, ``lastIndexOf``, ``isSorted``;
- strings: ``lowerAscii``, ``upperAscii``, ``trim``, ``join``, ``split``, ``indexOf``,
  ``replace``.

cel-python calls ``x.f(y)`` and ``f(x, y)`` alike: which of the two the API server declares
(``sign(q)`` but ``q.isInteger()``) is held by ``declarations`` and checked by ``cel_type_check``
before any policy is evaluated (``policy_admission``).

A call with arguments of the wrong type raises TypeError, which cel-python reports as "no
such overload", as cel-go does.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from celpy import celtypes

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# resource.ParseQuantity's grammar: a signed decimal number, then a binary suffix (Ki … Ei), a
# decimal SI suffix (n u m "" k M G T P E) or a decimal exponent (e3, E-2).
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


class Quantity:
    """A ``resource.Quantity`` value in CEL: exact (Decimal), compared by value."""

    __slots__ = ("value",)

    def __init__(self, value: Decimal) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Quantity({self.value})"


def parse(text: str) -> Decimal | None:
    match = _QUANTITY.match(text)
    if match is None:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        amount = Decimal(number)
    except InvalidOperation:
        return None
    if suffix in _BINARY:
        return amount * _BINARY[suffix]
    if suffix in _DECIMAL:
        return amount.scaleb(_DECIMAL[suffix])
    return amount.scaleb(int(suffix[1:]))


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("no such overload: expected a string")
    return str(value)


def is_quantity(value: Any) -> celtypes.BoolType:
    return celtypes.BoolType(parse(_text(value)) is not None)


def quantity(value: Any) -> Quantity:
    parsed = parse(_text(value))
    if parsed is None:
        raise ValueError(f"quantities must match the regular expression: {value!r}")
    return Quantity(parsed)


def _quantity(value: Any) -> Quantity:
    if not isinstance(value, Quantity):
        raise TypeError("no such overload: expected a quantity")
    return value


def _other(value: Any) -> Decimal:
    if isinstance(value, Quantity):
        return value.value
    if isinstance(value, celtypes.IntType) and not isinstance(value, celtypes.BoolType):
        return Decimal(int(value))
    raise TypeError("no such overload: expected a quantity or an int")


def _fits_int64(value: Decimal) -> bool:
    return value == value.to_integral_value() and INT64_MIN <= value <= INT64_MAX


def is_integer(q: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_fits_int64(_quantity(q).value))


def as_integer(q: Any) -> celtypes.IntType:
    value = _quantity(q).value
    if not _fits_int64(value):
        raise ValueError("cannot convert value to integer")
    return celtypes.IntType(int(value))


def as_approximate_float(q: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(_quantity(q).value))


def sign(q: Any) -> celtypes.IntType:
    value = _quantity(q).value
    return celtypes.IntType((value > 0) - (value < 0))


def compare_to(q: Any, other: Any) -> celtypes.IntType:
    a, b = _quantity(q).value, _quantity(other).value
    return celtypes.IntType((a > b) - (a < b))


def is_greater_than(q: Any, other: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_quantity(q).value > _quantity(other).value)


def is_less_than(q: Any, other: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_quantity(q).value < _quantity(other).value)


def add(q: Any, other: Any) -> Quantity:
    return Quantity(_quantity(q).value + _other(other))


def sub(q: Any, other: Any) -> Quantity:
    return Quantity(_quantity(q).value - _other(other))


# --- lists ------------------------------------------------------------------------------------
def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError("no such overload: expected a list")
    return value


def _comparable(items: list[Any]) -> None:
    kinds = {type(i) for i in items}
    if len(kinds) > 1:
        raise TypeError("no such overload: list elements of different types")


def list_sum(values: Any) -> Any:
    items = _list(values)
    _comparable(items)
    if not items:
        return celtypes.IntType(0)
    total = items[0]
    for item in items[1:]:
        total = total + item
    return total


def list_max(values: Any) -> Any:
    items = _list(values)
    _comparable(items)
    if not items:
        raise ValueError("max called on empty list")
    return max(items)


def list_min(values: Any) -> Any:
    items = _list(values)
    _comparable(items)
    if not items:
        raise ValueError("min called on empty list")
    return min(items)


def is_sorted(values: Any) -> celtypes.BoolType:
    items = _list(values)
    _comparable(items)
    return celtypes.BoolType(all(a <= b for a, b in zip(items, items[1:])))


def index_of(target: Any, item: Any) -> celtypes.IntType:
    """``list.indexOf(x)`` (lists library) or ``string.indexOf(s)`` (strings library)."""
    if isinstance(target, str):
        return celtypes.IntType(str(target).find(_text(item)))
    items = _list(target)
    for index, value in enumerate(items):
        if value == item:
            return celtypes.IntType(index)
    return celtypes.IntType(-1)


def last_index_of(target: Any, item: Any) -> celtypes.IntType:
    if isinstance(target, str):
        return celtypes.IntType(str(target).rfind(_text(item)))
    items = _list(target)
    for index in range(len(items) - 1, -1, -1):
        if items[index] == item:
            return celtypes.IntType(index)
    return celtypes.IntType(-1)


# --- strings ----------------------------------------------------------------------------------
def lower_ascii(value: Any) -> celtypes.StringType:
    return celtypes.StringType("".join(c.lower() if c.isascii() else c for c in _text(value)))


def upper_ascii(value: Any) -> celtypes.StringType:
    return celtypes.StringType("".join(c.upper() if c.isascii() else c for c in _text(value)))


def trim(value: Any) -> celtypes.StringType:
    """Unicode white space at both ends (Go's strings.TrimSpace)."""
    return celtypes.StringType(_text(value).strip())


def join(values: Any, separator: Any = "") -> celtypes.StringType:
    items = _list(values)
    return celtypes.StringType(_text(separator).join(_text(i) for i in items))


def split(value: Any, separator: Any) -> celtypes.ListType:
    return celtypes.ListType(celtypes.StringType(s) for s in _text(value).split(_text(separator)))


def replace(value: Any, old: Any, new: Any) -> celtypes.StringType:
    return celtypes.StringType(_text(value).replace(_text(old), _text(new)))


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "isQuantity": is_quantity,
    "quantity": quantity,
    "isInteger": is_integer,
    "asInteger": as_integer,
    "asApproximateFloat": as_approximate_float,
    "sign": sign,
    "compareTo": compare_to,
    "isGreaterThan": is_greater_than,
    "isLessThan": is_less_than,
    "add": add,
    "sub": sub,
    "sum": list_sum,
    "max": list_max,
    "isSorted": is_sorted,
    "indexOf": index_of,
    "lastIndexOf": last_index_of,
    "lowerAscii": lower_ascii,
    "upperAscii": upper_ascii,
    "trim": trim,
    "join": join,
    "split": split,
    "replace": replace,
}
