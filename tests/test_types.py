"""Types are checked: mypy over what ships (webhook, policies, certs), the benchmarks and the test
helpers finds nothing. The configuration is pyproject.toml's [tool.mypy]; the cache
(.mypy_cache) makes a run after a small change take seconds."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_mypy_finds_no_errors():
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert (done.returncode, done.stdout) == (0, ""), done.stdout[-5000:] + done.stderr[-2000:]


def test_mypy_checks_every_package_that_is_ours():
    import tomllib

    configured = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert sorted(configured) == ["bench", "certs", "policies", "testing", "webhook"]
