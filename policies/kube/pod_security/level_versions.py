"""Pod Security levels and policy versions, read as upstream's ``k8s.io/pod-security-admission/api``
reads the namespace labels (``ParseLevel``, ``ParseVersion``, ``LevelVersion.String``)."""
from __future__ import annotations

import re
from typing import NamedTuple

PRIVILEGED = "privileged"
BASELINE = "baseline"
RESTRICTED = "restricted"
LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)
LATEST = "latest"

# Go's regexp ``$`` ends the text (Python's would also accept a trailing newline), hence fullmatch.
_VERSION = re.compile(r"v1\.([0-9]|[1-9][0-9]*)")
_INT64_MAX = 2**63 - 1
_LEVEL_ERROR = f"must be one of {', '.join(LEVELS)}"
_VERSION_ERROR = 'must be "latest" or "v1.x"'


class LevelVersion(NamedTuple):
    """A namespace's policy for one mode (enforce, audit or warn): level and version."""
    level: str                          # "privileged" | "baseline" | "restricted"
    version: tuple[int, int] | None     # (1, 29); None = "latest"

    def __str__(self) -> str:
        """Upstream's ``LevelVersion.String``: ``restricted:v1.29``, ``baseline:latest``."""
        return f"{self.level}:{version_text(self.version)}"


def parse_level(text: str) -> str:
    """The level a label value names; ValueError with upstream's text for anything else."""
    if text in LEVELS:
        return text
    raise ValueError(_LEVEL_ERROR)


def parse_version(text: str) -> tuple[int, int] | None:
    """``latest`` (None) or ``v1.N``; ValueError with upstream's text for anything else (``v1.05``,
    ``1.29``, ``v2.0``)."""
    if text == LATEST:
        return None
    match = _VERSION.fullmatch(text) if isinstance(text, str) else None
    # Go's strconv.Atoi fails past int64, and upstream answers that with the same error.
    if match is None or len(match.group(1)) > 18 and int(match.group(1)) > _INT64_MAX:
        raise ValueError(_VERSION_ERROR)
    return (1, int(match.group(1)))


def version_text(version: tuple[int, int] | None) -> str:
    return LATEST if version is None else f"v{version[0]}.{version[1]}"


def compare_levels(a: str, b: str) -> int:
    """Upstream's ``CompareLevels``: -1, 0 or 1 as ``a`` is less strict than, as strict as or
    stricter than ``b``."""
    if a == b:
        return 0
    if a == PRIVILEGED:
        return -1
    if a == RESTRICTED:
        return 1
    if b == PRIVILEGED:
        return 1
    if b == RESTRICTED:
        return -1
    return 0
