"""A directory laid out exactly like a ConfigMap volume, updated the way the kubelet does it.

The kubelet's atomic writer puts every version in a fresh hidden directory (``..2024_…``),
points the ``..data`` symlink at it by renaming a new symlink over the old one, and exposes
each key as a symlink ``<key> -> ..data/<key>``; then it removes the old directory."""
from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

_versions = itertools.count(1)


class ConfigMapVolume:
    def __init__(self, directory: Path, key: str = "policy.yaml") -> None:
        self.directory = directory
        self.key = key
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        """The file the server is given: ``<volume>/<key>``."""
        return self.directory / self.key

    def write(self, content: str) -> None:
        version = self.directory / f"..2024_01_01_00_00_{next(_versions):02d}.000000001"
        version.mkdir()
        (version / self.key).write_text(content)
        data = self.directory / "..data"
        old = data.resolve() if data.is_symlink() else None
        staged = self.directory / "..data_tmp"
        staged.symlink_to(version.name)
        os.replace(staged, data)  # the atomic swap
        if not self.path.is_symlink():
            self.path.symlink_to(f"..data/{self.key}")
        if old is not None and old != version:
            shutil.rmtree(old)

    def remove_key(self) -> None:
        """The key was taken out of the ConfigMap (or the ConfigMap deleted)."""
        self.path.unlink()
