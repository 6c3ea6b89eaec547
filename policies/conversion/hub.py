"""The hub: every served MPIJob apiVersion, and the way from any one to any other.

v2beta1 (the storage version) is the hub; each older version is a spoke module with
``to_hub`` / ``from_hub``. Spoke to spoke goes through the hub, so a new version needs one
module and one line here, not a converter to every other version.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from policies.conversion import v1, v1alpha1, v1alpha2
from policies.conversion.spoke import DEFAULT_OPTIONS, ConversionOptions, Spoke
from policies.conversion.notes import Note
from policies.conversion.tree import Path, is_mapping
from policies.mpijob.reading import GROUP, HUB_API_VERSION, KIND

_SPOKE_MODULES: tuple[ModuleType, ...] = (v1alpha1, v1alpha2, v1)
SPOKES: Mapping[str, Spoke] = {module.SPOKE.api_version: module.SPOKE for module in _SPOKE_MODULES}
SERVED_VERSIONS: tuple[str, ...] = (HUB_API_VERSION, *SPOKES)
_MUTABLE_METADATA = ("labels", "annotations")


class ConversionError(ValueError):
    """The object cannot be converted at all: not an MPIJob of a known version."""


@dataclass(frozen=True)
class Conversion:
    obj: dict[str, Any]
    notes: tuple[Note, ...] = ()
    # Fields of the source that the target version cannot hold; they live on only in the
    # conversion-data annotation (reported when converting to an older version).
    dropped: tuple[Path, ...] = ()


def source_version(obj: Any) -> str:
    """The object's apiVersion, once it is known to be a convertible MPIJob."""
    if not is_mapping(obj):
        raise ConversionError(f"expected an MPIJob object, got {_kind_of(obj)}")
    if obj.get("kind") != KIND:
        raise ConversionError(f"expected kind {KIND}, got {obj.get('kind')!r}")
    version = obj.get("apiVersion")
    if version not in SERVED_VERSIONS:
        raise ConversionError(f"apiVersion {version!r} is not an MPIJob version this webhook converts "
                              f"({', '.join(SERVED_VERSIONS)})")
    if not is_mapping(obj.get("metadata")):
        raise ConversionError("metadata must be an object")
    return version


def check_desired(version: Any) -> str:
    if version not in SERVED_VERSIONS:
        raise ConversionError(f"cannot convert to {version!r}: supported versions are {', '.join(SERVED_VERSIONS)}")
    return version


def convert(obj: Any, desired: str, options: ConversionOptions = DEFAULT_OPTIONS) -> Conversion:
    """``obj`` as ``desired``; raises ConversionError only for malformed input."""
    source = source_version(obj)
    check_desired(desired)
    if source == desired:
        return Conversion(dict(obj))
    if source == HUB_API_VERSION:
        step = SPOKES[desired].converted_from_hub(obj, options)
        result = Conversion(step.obj, step.notes, step.dropped)
    elif desired == HUB_API_VERSION:
        step = SPOKES[source].converted_to_hub(obj, options)
        result = Conversion(step.obj, step.notes)
    else:
        first = SPOKES[source].converted_to_hub(obj, options)
        second = SPOKES[desired].converted_from_hub(first.obj, options)
        result = Conversion(second.obj, first.notes + second.notes, second.dropped)
    _check_identity(obj["metadata"], result.obj["metadata"])
    return result


def to_hub(obj: Any, options: ConversionOptions = DEFAULT_OPTIONS) -> dict[str, Any]:
    return convert(obj, HUB_API_VERSION, options).obj


def advisory(api_version: str) -> str:
    """What users of ``api_version`` must know before their jobs run under v2beta1 ("" if nothing)."""
    spoke = SPOKES.get(api_version)
    return spoke.advisory if spoke else ""


def _check_identity(before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """The API server refuses a conversion that changes metadata beyond labels and annotations;
    a converter that did would be a bug, caught here with a clear message."""
    if before is after:
        return
    changed = [k for k, v in after.items() if k not in _MUTABLE_METADATA and before.get(k) != v]
    changed += [k for k, v in before.items() if k not in after and k not in _MUTABLE_METADATA and v != after.get(k)]
    changed.sort()
    if changed:
        raise RuntimeError(f"conversion changed metadata.{', metadata.'.join(changed)}")


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    return {list: "a list", str: "a string", bool: "a boolean"}.get(type(value), f"a {type(value).__name__}")


def _check_registry() -> None:
    """Run at import: a spoke that is mis-declared must fail loudly before serving, not at the
    first conversion of a job."""
    for module in _SPOKE_MODULES:
        spoke = getattr(module, "SPOKE", None)
        problems = []
        if not isinstance(spoke, Spoke):
            problems.append("has no SPOKE")
        else:
            if getattr(module, "API_VERSION", None) != spoke.api_version:
                problems.append("API_VERSION differs from SPOKE.api_version")
            if not spoke.api_version.startswith(f"{GROUP}/") or spoke.api_version == HUB_API_VERSION:
                problems.append(f"bad apiVersion {spoke.api_version!r}")
            if not (callable(spoke.up) and callable(spoke.down)):
                problems.append("up/down are not callable")
            for name in ("to_hub", "from_hub"):
                if not callable(getattr(module, name, None)):
                    problems.append(f"has no {name}()")
        if problems:
            raise RuntimeError(f"conversion module {module.__name__}: {'; '.join(problems)}")
    if len(SPOKES) != len(_SPOKE_MODULES):
        raise RuntimeError("two conversion modules declare the same apiVersion")


_check_registry()
