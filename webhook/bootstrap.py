"""Wires one server process together from the serve options: policy, cluster view, runtime.

Called once per gunicorn worker (after fork), so every process owns its own state."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from webhook.runtime import Runtime, default_runtime


@dataclass(frozen=True)
class ServeOptions:
    host: str = "0.0.0.0"
    port: int = 8443
    cert_file: Path | None = None
    key_file: Path | None = None
    dev: bool = False
    workers: int = 2
    threads: int = 8


def build_runtime(options: ServeOptions) -> Runtime:
    return default_runtime()
