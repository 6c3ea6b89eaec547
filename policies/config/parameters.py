"""Rule and mutation parameters from YAML to their ``Params`` dataclass: each value converted to the
field's declared type, or a problem that says which type was expected."""
from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from enum import Enum
from typing import Any

from policies.config.problems import _child, _item, _Problems
from policies.messages import did_you_mean


def yaml_name(field_name: str) -> str:
    """``max_per_worker`` → ``maxPerWorker``: Kubernetes-style keys in the file."""
    head, *rest = field_name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _type_hints(params_type: type) -> dict[str, Any]:
    return typing.get_type_hints(params_type)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


_SEQUENCES = (tuple, list, frozenset, set, Sequence, typing.Sequence, Iterable)
_MAPPINGS = (dict, Mapping, typing.Mapping)


def _describe_type(tp: Any) -> str:
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp in (float, Decimal):
        return "a number"
    if tp is str:
        return "a string"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "one of " + ", ".join(str(m.value) for m in tp)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if _is_union(tp):
        return " or ".join(_describe_type(a) for a in typing.get_args(tp) if a is not type(None))
    if origin in _SEQUENCES:
        return "a list"
    if origin in _MAPPINGS or dataclasses.is_dataclass(tp):
        return "a mapping"
    return "a value"


def _convert(tp: Any, value: Any, path: str, problems: _Problems) -> Any:
    """``value`` from YAML as type ``tp``; on a mismatch, a problem at ``path`` (and None)."""
    if tp is Any:
        return _freeze(value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            trial = _Problems(problems.lines)
            converted = _convert(option, value, path, trial)
            if not trial.found:
                return converted
        return _mismatch(tp, value, path, problems)
    if origin is typing.Literal:
        if value in args:
            return value
        problems.add(path, f"unsupported value {_show(value)}: must be one of {', '.join(map(str, args))}"
                     f"{did_you_mean(str(value), map(str, args))}")
        return None
    if isinstance(tp, type) and issubclass(tp, Enum):
        values = [m.value for m in tp]
        if value in values:
            return tp(value)
        problems.add(path, f"unsupported value {_show(value)}: must be one of {', '.join(map(str, values))}"
                     f"{did_you_mean(str(value), map(str, values))}")
        return None
    if tp is bool:
        return value if isinstance(value, bool) else _mismatch(tp, value, path, problems)
    if tp is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _mismatch(tp, value, path, problems)
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok else _mismatch(tp, value, path, problems)
    if tp is Decimal:
        ok = isinstance(value, (int, float, str)) and not isinstance(value, bool)
        try:
            return Decimal(str(value)) if ok else _mismatch(tp, value, path, problems)
        except ArithmeticError:
            return _mismatch(tp, value, path, problems)
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            problems.add(path, f"must be a string, not the number {value}; quote it: \"{value}\"")
            return None
        return _mismatch(tp, value, path, problems)
    if origin in _SEQUENCES:
        if not isinstance(value, list):
            return _mismatch(tp, value, path, problems)
        if origin is tuple and args and args[-1] is not Ellipsis:  # fixed-length tuple
            if len(value) != len(args):
                problems.add(path, f"must be a list of exactly {len(args)} items, not {len(value)}")
                return None
            return tuple(_convert(t, v, _item(path, i), problems) for i, (t, v) in enumerate(zip(args, value)))
        item_type = args[0] if args else Any
        items = [_convert(item_type, v, _item(path, i), problems) for i, v in enumerate(value)]
        return frozenset(items) if origin in (frozenset, set) else tuple(items)
    if origin in _MAPPINGS:
        if not isinstance(value, Mapping):
            return _mismatch(tp, value, path, problems)
        key_type, value_type = args if args else (str, Any)
        return {_convert(key_type, k, _child(path, k), problems): _convert(value_type, v, _child(path, k), problems)
                for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            return _mismatch(tp, value, path, problems)
        fields = _params_fields(tp, value, path, problems)
        return _construct_params(tp, fields, path, problems)
    raise TypeError(f"{path}: parameter type {tp!r} cannot be read from a policy file")


def _mismatch(tp: Any, value: Any, path: str, problems: _Problems) -> None:
    problems.add(path, f"must be {_describe_type(tp)}, not {_kind_of(value)} {_show(value)}")
    return None


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "the boolean"
    if isinstance(value, (int, float)):
        return "the number"
    if isinstance(value, str):
        return "the string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__


def _show(value: Any) -> str:
    if isinstance(value, (list, Mapping)):
        return ""
    text = repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _freeze(v) for k, v in value.items()}
    return value


def _params_fields(params_type: type, value: Mapping[str, Any], path: str, problems: _Problems) -> dict[str, Any]:
    """The fields given in the file, by Python name, converted to their declared types."""
    hints = _type_hints(params_type)
    by_yaml = {yaml_name(f.name): f for f in dataclasses.fields(params_type) if f.init}
    given: dict[str, Any] = {}
    for key, item in value.items():
        field_path = _child(path, key)
        target = by_yaml.get(key)
        if target is None:
            known = ", ".join(by_yaml) or "none"
            problems.add(field_path, f"unknown parameter {key!r}{did_you_mean(key, by_yaml)} (parameters: {known})")
            continue
        given[target.name] = _convert(hints[target.name], item, field_path, problems)
    return given


def _construct_params(params_type: type, fields: Mapping[str, Any], path: str, problems: _Problems,
                      base: Any = None) -> Any:
    try:
        params = dataclasses.replace(base, **fields) if base is not None else params_type(**fields)
    except (TypeError, ValueError) as exc:
        problems.add(path, str(exc))
        return None
    for low, high in _ranges(params):
        if getattr(params, low) > getattr(params, high):
            problems.add(path, f"{yaml_name(low)} ({getattr(params, low)}) is above {yaml_name(high)} "
                               f"({getattr(params, high)}): nothing could pass; lower {yaml_name(low)} "
                               f"or raise {yaml_name(high)}")
            return None
    return params


def _ranges(params: Any) -> Iterator[tuple[str, str]]:
    """Field pairs that form a range by name: ``min``/``max``, ``min_<x>``/``max_<x>``."""
    names = {f.name for f in dataclasses.fields(params)}
    for name in sorted(names):
        if name == "min" or name.startswith("min_"):
            high = "max" + name[3:]
            numbers = (int, float, Decimal)
            if high in names and all(isinstance(getattr(params, n), numbers) and not isinstance(getattr(params, n), bool)
                                     for n in (name, high)):
                yield name, high


def _accepts_none(params_type: type, field_name: str) -> bool:
    tp = _type_hints(params_type)[field_name]
    return _is_union(tp) and type(None) in typing.get_args(tp)
