"""JSON values nobody can change: what a memo hands to every request that asks for it.

``read_only`` copies maps and lists into ``ReadOnlyDict`` and ``ReadOnlyList``: subclasses of
``dict`` and ``list``, so every reader (``isinstance(x, list)``, ``json.dumps``, ``==``, ``get``)
sees what it always saw at the same speed, while a write raises ``TypeError`` instead of
changing what the next request reads. A copy (``dict(value)``, ``copy.copy``,
``copy.deepcopy``) is an ordinary, writable ``dict`` or ``list``.
"""
from __future__ import annotations

import copy
from typing import Any, NoReturn


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"a shared {type(self).__name__} is not to be changed: copy it first")


class ReadOnlyDict(dict[str, Any]):
    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {key: copy.deepcopy(value, memo) for key, value in self.items()}


class ReadOnlyList(list[Any]):
    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = reverse = sort = clear = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(value, memo) for value in self]


def read_only(value: Any, made: dict[int, Any] | None = None) -> Any:
    """``value`` with every map and list in it copied read-only; scalars are shared (they cannot
    change). ``made`` maps what was copied already to its copy, so one map reached twice (a
    container both in its pod template and in the list of containers) stays one object."""
    if not isinstance(value, (dict, list)):
        return value
    made = {} if made is None else made
    done = made.get(id(value))
    if done is not None:
        return done
    if isinstance(value, dict):
        frozen: Any = ReadOnlyDict({key: read_only(item, made) for key, item in value.items()})
    else:
        frozen = ReadOnlyList([read_only(item, made) for item in value])
    made[id(value)] = frozen
    return frozen
