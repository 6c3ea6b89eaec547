"""``trainer.api.is_mapping`` (and ``pod_resources._is_mapping``) answer what
``isinstance(value, Mapping)`` answers, for every kind of value a TrainJob, a runtime or a memo's
read-only copy holds, and for mappings that are not dicts."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest

from policies.kube.pod_resources import _is_mapping
from policies.trainer.api import is_mapping, mapping, metadata, spec
from policies.trainer.read_only import ReadOnlyDict, ReadOnlyList


class _NotADict(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


VALUES = [{}, {"a": 1}, ReadOnlyDict({"a": 1}), MappingProxyType({"a": 1}), _NotADict(), None, [], ReadOnlyList([1]),
          (), "", "spec", 0, 1.5, True, b"x", {1, 2}]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_is_mapping_is_isinstance_mapping(value: Any) -> None:
    assert is_mapping(value) is isinstance(value, Mapping)
    assert _is_mapping(value) is isinstance(value, Mapping)


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_readers_hand_out_the_mapping_itself_or_an_empty_one(value: Any) -> None:
    obj = {"spec": value, "metadata": value, "trainer": value}
    for read in (spec(obj), metadata(obj), mapping(obj, "trainer")):
        assert read is value if isinstance(value, Mapping) else read == {}
