"""Where the recorded API-server requests and the upstream manifests are, and how to read them:
for the tests and the benchmarks alike. They are in the repository itself (tests/data/README.md
says where each group comes from), so a plain clone tests and benchmarks with nothing beside it."""
from __future__ import annotations

import json
from pathlib import Path

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
