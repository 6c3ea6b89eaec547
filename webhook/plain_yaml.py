"""YAML for people to read and commit: never anchors and aliases.

Objects the converters build share subtrees (a v1alpha1 template becomes the Launcher's and the
Worker's); PyYAML writes a subtree it meets twice once, as ``&id001``, and then as ``*id001``.
That is valid YAML, but not what anyone writes, diffs or edits: every occurrence is written out.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import IO, Any

import yaml


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(document: Any, stream: IO[str]) -> None:
    dump_all([document], stream)


def dump_all(documents: Iterable[Any], stream: IO[str]) -> None:
    yaml.dump_all(documents, stream, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True, width=120)
