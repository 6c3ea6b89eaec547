"""Shared fixtures. HYPOTHESIS_PROFILE=ci (set by .ci/run) runs the long property runs."""
from __future__ import annotations

import os
import sysconfig
from pathlib import Path

from hypothesis import HealthCheck, settings

from testing.reference_data import (CAPTURED, DATA, ROOT, TRAINER, UPSTREAM, captured_reviews, load_yaml_documents,
                                    upstream_v2beta1_jobs)

# The real server over TLS for end-to-end tests (fixture ``dev_server``).
pytest_plugins = ("testing.tls_server",)

__all__ = ["CAPTURED", "DATA", "ROOT", "TRAINER", "UPSTREAM", "captured_reviews", "console_script",
           "load_yaml_documents", "upstream_v2beta1_jobs"]

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def console_script(name: str = "mpijob-webhook") -> Path:
    """The console script installed beside the running interpreter (the checkout's .venv in the
    quickstart), not whichever one PATH happens to find first."""
    return Path(sysconfig.get_path("scripts")) / name
