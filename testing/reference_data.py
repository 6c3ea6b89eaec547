"""Where the recorded API-server requests and the upstream manifests are, and how to read them:
for the tests and the benchmarks alike. They are in the repository itself (tests/data/README.md
says where each group comes from), so a plain clone tests and benchmarks with nothing beside it."""
from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import NamedTuple

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
CAPTURED = DATA / "captured"
UPSTREAM = DATA / "upstream"
TRAINER = DATA / "trainer"


# libyaml's parser where PyYAML has it: the same documents (the constructor is PyYAML's safe one
# either way), parsed over ten times faster; the Trainer examples alone take seconds without it.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml_documents(path: Path) -> list[dict]:
    return [d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d]


def captured_reviews() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(CAPTURED.glob("*.json"))}


def upstream_v2beta1_jobs() -> dict[str, dict]:
    return {p.name: load_yaml_documents(p)[0] for p in sorted((UPSTREAM / "v2beta1").glob("*.yaml"))}


POD_SECURITY = DATA / "pod-security"


class PodSecurityFixture(NamedTuple):
    """One of upstream's PodSecurity fixtures: a pod that must pass or fail at a level and version."""
    level: str                      # "baseline" or "restricted"
    version: tuple[int, int]        # (1, 29)
    verdict: str                    # "pass" or "fail"
    name: str                       # upstream's name: the check ID in lower case and a number, or "base…"
    pod: dict                       # the whole Pod (read-only: shared between fixtures)

    @property
    def check_name(self) -> str:
        """The check the fixture was made for, in lower case: "procmount_restricted1" -> "procmount_restricted"."""
        return self.name.rstrip("0123456789")

    def __str__(self) -> str:
        return f"{self.level}/v{self.version[0]}.{self.version[1]}/{self.verdict}/{self.name}"


@cache
def pod_security_fixtures() -> tuple[PodSecurityFixture, ...]:
    """Every fixture of tests/data/pod-security/index.txt, each distinct pod parsed once."""
    pods: dict[str, dict] = {}
    fixtures = []
    for line in (POD_SECURITY / "index.txt").read_text().splitlines():
        if line.startswith("#"):
            continue
        level, version, verdict, file_name = line.split()
        if file_name not in pods:
            pods[file_name] = yaml.load((POD_SECURITY / "pods" / file_name).read_text(), Loader=_LOADER)
        major, minor = version.removeprefix("v").split(".")
        fixtures.append(PodSecurityFixture(level, (int(major), int(minor)), verdict,
                                           file_name.rsplit("-", 1)[0], pods[file_name]))
    return tuple(fixtures)
