"""Shared fixtures. HYPOTHESIS_PROFILE=ci (set by .ci/run) runs the long property runs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from testing.reference_data import (CAPTURED, REFERENCE, ROOT, UPSTREAM, captured_reviews, load_yaml_documents,
                                    upstream_v2beta1_jobs)

# The real server over TLS for end-to-end tests (fixture ``dev_server``).
pytest_plugins = ("testing.tls_server",)

__all__ = ["CAPTURED", "REFERENCE", "ROOT", "UPSTREAM", "captured_reviews", "load_yaml_documents",
           "upstream_v2beta1_jobs"]

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    if not REFERENCE.is_dir():
        pytest.fail(f"reference material not found at {REFERENCE}: clone next to shared/")
    return REFERENCE
