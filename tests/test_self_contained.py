"""The repository carries everything its tests, benchmarks and examples read: a plain clone, with
nothing beside it, tests. Nothing in it names a folder outside the checkout."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CAPTURED, DATA, ROOT, TRAINER, UPSTREAM

# Built here so that this file does not contain what it looks for.
OUTSIDE_PATHS = (".." + "/shared", "shared" + "/reference")


def tracked_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listed.decode().split("\0") if name]


# CI's script alone may point the tests at what the machine has beside the checkout (the control
# plane's binaries, through KUBEBUILDER_ASSETS); the tests themselves only read that variable.
MAY_NAME_OUTSIDE = {ROOT / ".ci" / "run"}


def test_no_tracked_file_names_a_folder_outside_the_checkout():
    offenders = []
    for path in tracked_files():
        if not path.is_file() or path in MAY_NAME_OUTSIDE:  # deleted in the work tree, not yet committed
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        offenders += [f"{path.relative_to(ROOT)}: {needle}" for needle in OUTSIDE_PATHS if needle in text]
    assert offenders == []


def test_the_data_folders_hold_what_the_tests_read():
    assert len(list(CAPTURED.glob("*.request.json"))) == 20
    assert {p.parent.name for p in UPSTREAM.glob("*/*.yaml")} == {"crd", "v1", "v1alpha1", "v1alpha2", "v2beta1"}
    assert {p.name for p in (TRAINER / "crds").glob("*.yaml")} == {
        f"trainer.kubeflow.org_{kind}.yaml" for kind in ("clustertrainingruntimes", "trainingruntimes", "trainjobs")}
    documented = (DATA / "README.md").read_text()
    for folder in ("captured/", "upstream/crd/", "trainer/crds/", "trainer/webhook/", "trainer/examples/opendatahub/",
                   "trainer/v2.1-shape/"):
        assert f"`{folder}" in documented, folder


def test_an_empty_parametrisation_fails_collection(tmp_path: Path):
    """A glob over a missing data folder parametrises nothing: with the project's pytest settings
    that is a collection error, not one silently skipped test."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "test_empty.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.parametrize('name', [])\n"
        "def test_nothing(name):\n"
        "    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_empty.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == pytest.ExitCode.INTERRUPTED, run.stdout + run.stderr
    assert "Empty parameter set in 'test_nothing'" in run.stdout
