"""Shared fixtures. HYPOTHESIS_PROFILE=ci (set by .ci/run) runs the long property runs."""
from __future__ import annotations

import json
import os
import sysconfig
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, settings

# The real server over TLS for end-to-end tests (fixture ``dev_server``).
pytest_plugins = ("tests.tls_server",)

ROOT = Path(__file__).resolve().parent.parent
# The recorded requests and upstream manifests the tests, benchmarks and examples read: in the
# repository itself (tests/data/README.md says where each group comes from), so a plain clone tests.
DATA = ROOT / "tests" / "data"
CAPTURED = DATA / "captured"
UPSTREAM = DATA / "upstream"
TRAINER = DATA / "trainer"

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def console_script(name: str = "mpijob-webhook") -> Path:
    """The console script installed beside the running interpreter (the checkout's .venv in the
    quickstart), not whichever one PATH happens to find first."""
    return Path(sysconfig.get_path("scripts")) / name


def load_yaml_documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def captured_reviews() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(CAPTURED.glob("*.json"))}


def upstream_v2beta1_jobs() -> dict[str, dict]:
    return {p.name: load_yaml_documents(p)[0] for p in sorted((UPSTREAM / "v2beta1").glob("*.yaml"))}
