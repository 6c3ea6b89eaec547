"""A directory laid out like a mounted Secret volume, updated the way the kubelet updates it.

The kubelet's atomic writer puts each version of the Secret in a timestamped directory, points the
``..data`` symlink at it by renaming a temporary symlink over it, and the visible files
(``tls.crt`` → ``..data/tls.crt``) never change. service-ca and cert-manager renewals reach a pod
this way."""
from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

from certs.authority import Issued


class SecretVolume:
    KEYS = ("tls.crt", "tls.key", "ca.crt")

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self._versions = itertools.count(1)

    @property
    def cert_file(self) -> Path:
        return self.directory / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.directory / "tls.key"

    def publish(self, ca: Issued, serving: Issued) -> None:
        self.publish_files({"tls.crt": serving.cert_pem(), "tls.key": serving.key_pem(), "ca.crt": ca.cert_pem()})

    def publish_files(self, files: dict[str, bytes]) -> None:
        version = f"..2026_01_01_00_00_00.{next(self._versions)}"
        (self.directory / version).mkdir()
        for name, content in files.items():
            (self.directory / version / name).write_bytes(content)
        data = self.directory / "..data"
        previous = os.readlink(data) if data.is_symlink() else None
        tmp = self.directory / "..data_tmp"
        os.symlink(version, tmp)
        os.rename(tmp, data)
        for name in files:
            link = self.directory / name
            if not link.is_symlink():
                os.symlink(f"..data/{name}", link)
        if previous:
            shutil.rmtree(self.directory / previous)
