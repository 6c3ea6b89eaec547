"""Shared fixtures. HYPOTHESIS_PROFILE=ci (set by .ci/run) runs the long property runs."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, settings

# The real server over TLS for end-to-end tests (fixture ``dev_server``).
pytest_plugins = ("tests.tls_server",)

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT.parent / "shared" / "reference"
CAPTURED = REFERENCE / "captured"
UPSTREAM = REFERENCE / "upstream"

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def load_yaml_documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def captured_reviews() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(CAPTURED.glob("*.json"))}


def upstream_v2beta1_jobs() -> dict[str, dict]:
    return {p.name: load_yaml_documents(p)[0] for p in sorted((UPSTREAM / "v2beta1").glob("*.yaml"))}


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    if not REFERENCE.is_dir():
        pytest.fail(f"reference material not found at {REFERENCE}: clone next to shared/")
    return REFERENCE
