"""What is wrong with a policy file: each problem with its field path and line, all reported at once."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.messages import did_you_mean


@dataclass(frozen=True)
class PolicyProblem:
    path: str  # rules.worker-count.params.max ("" for the whole document)
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.path or '(document)'}: {self.message}"


class PolicyError(ValueError):
    """The policy file cannot be used; ``problems`` says every reason, with field paths."""

    def __init__(self, problems: Sequence[PolicyProblem], source: str = "policy file") -> None:
        self.problems = tuple(problems)
        self.source = source
        super().__init__(self.summary())

    def summary(self) -> str:
        listed = "\n".join(f"  {p}" for p in self.problems)
        count = len(self.problems)
        return f"{self.source} is invalid ({count} problem{'s' if count != 1 else ''}):\n{listed}"

    def first_line(self) -> str:
        """One line for logs, metrics details and /readyz."""
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return f"{self.source}: {self.problems[0]}{more}"


class _Problems:
    """Collects problems while the document is read, so all are reported at once."""

    def __init__(self, lines: Mapping[str, int]) -> None:
        self.lines = lines
        self.found: list[PolicyProblem] = []

    def add(self, path: str, message: str) -> None:
        self.found.append(PolicyProblem(path, message, self._line(path)))

    def _line(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = _parent(path)
        return None


def _child(path: str, key: Any) -> str:
    text = str(key)
    if re.fullmatch(r"[A-Za-z0-9_-]+", text):
        return f"{path}.{text}" if path else text
    return f"{path}[{text}]"


def _item(path: str, index: int) -> str:
    return f"{path}[{index}]"


def _parent(path: str) -> str:
    match = re.search(r"(\.[A-Za-z0-9_-]+|\[[^\]]*\])$", path)
    return path[: match.start()] if match else ""


def _check_keys(value: Mapping[str, Any], path: str, known: Sequence[str], problems: _Problems) -> None:
    for key in value:
        if key not in known:
            where = path or "the top level"
            problems.add(_child(path, key), f"unknown field {key!r} at {where}{did_you_mean(str(key), known)}"
                                            f" (fields: {', '.join(known)})")
