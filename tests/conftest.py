"""Shared fixtures. HYPOTHESIS_PROFILE=ci (set by .ci/run) runs the long property runs, and the
tests marked ``ci_only``: long repetitions of what a smaller case checks in every run."""
from __future__ import annotations

import os
import sysconfig
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from testing.reference_data import (CAPTURED, DATA, ROOT, TRAINER, UPSTREAM, captured_reviews, load_yaml_documents,
                                    upstream_v2beta1_jobs)

# The real server over TLS for end-to-end tests (fixture ``dev_server``); a real Kubernetes control
# plane when KUBEBUILDER_ASSETS names its binaries (fixtures ``control_plane``, ``kube_namespace``).
pytest_plugins = ("testing.tls_server", "testing.control_plane")

__all__ = ["CAPTURED", "DATA", "ROOT", "TRAINER", "UPSTREAM", "captured_reviews", "console_script",
           "load_yaml_documents", "upstream_v2beta1_jobs"]

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile(
    "ci", max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
settings.load_profile(PROFILE)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "ci_only: a long repetition (the widest case, every attack) of what a smaller "
                                       "case checks in every run; runs only under HYPOTHESIS_PROFILE=ci (.ci/run)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skipped, not deselected: ``-ra`` lists what the quick run left to CI."""
    if PROFILE == "ci":
        return
    to_ci = pytest.mark.skip(reason="a long repetition of a smaller case; runs under HYPOTHESIS_PROFILE=ci (.ci/run)")
    for item in items:
        if item.get_closest_marker("ci_only") is not None:
            item.add_marker(to_ci)


def console_script(name: str = "mpijob-webhook") -> Path:
    """The console script installed beside the running interpreter (the checkout's .venv in the
    quickstart), not whichever one PATH happens to find first."""
    return Path(sysconfig.get_path("scripts")) / name
