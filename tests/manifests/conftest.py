from __future__ import annotations

from pathlib import Path

import pytest

from tests.manifests.build import OVERLAYS, Object, build, prepare


@pytest.fixture(scope="session")
def prepared_manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare(tmp_path_factory.mktemp("manifests"))


@pytest.fixture(scope="session")
def overlays(prepared_manifests: Path) -> dict[str, list[Object]]:
    return {overlay: build(prepared_manifests, overlay) for overlay in OVERLAYS}
