"""A lint of the Dockerfile's essentials (no container engine here to build it): stages, pinned
base, numeric non-root user, no compilers in the image that runs, exec-form entrypoint, and the
same serve command as the Deployment."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest

from tests.conftest import ROOT
from tests.manifests.build import find
from webhook.cli import build_parser

COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|cc|make|cmake|build-essential|[\w.-]+-devel|[\w.-]+-dev|rust|cargo)\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) with comments dropped and continuation lines joined."""
    logical, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        logical.append(current.strip())
        current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in logical]


def parse() -> tuple[dict[str, str], list[Stage]]:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, rest in instructions((ROOT / "Dockerfile").read_text()):
        if keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip()
        elif keyword == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        else:
            assert stages, f"{keyword} before FROM"
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def exec_form(value: str) -> list[str]:
    parsed = json.loads(value)  # shell form would not parse as a JSON array
    assert isinstance(parsed, list) and all(isinstance(p, str) for p in parsed)
    return parsed


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse()[1]


def test_multi_stage(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    final = stages[-1]
    copies = final.all("COPY")
    assert any(c.startswith("--from=") for c in copies), "the final stage takes the build's result"
    assert all(c.startswith("--from=") for c in copies), "the final stage copies nothing from the source tree"


def test_base_images_are_pinned(stages: list[Stage]) -> None:
    for stage in stages:
        image = stage.base
        digest = re.search(r"@sha256:[0-9a-f]{64}$", image)
        tag = re.search(r":([^/:@]+)$", image.split("@")[0])
        assert digest or (tag and re.search(r"\d", tag.group(1)) and tag.group(1) != "latest"), image
        assert image.count("/") >= 1 and "." in image.split("/")[0], f"{image}: name the registry"


def test_runs_as_a_numeric_non_root_user(stages: list[Stage]) -> None:
    users = stages[-1].all("USER")
    assert users, "the final stage sets USER"
    user = users[-1].split(":")[0]
    assert user.isdigit() and int(user) != 0


def test_the_deployment_runs_as_the_images_user(overlays) -> None:
    user = int(parse()[1][-1].all("USER")[-1].split(":")[0])
    pod = find(overlays["cert-manager"], "Deployment", "mpijob-webhook")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == user


def test_no_compilers_in_the_final_image(stages: list[Stage]) -> None:
    for run in stages[-1].all("RUN"):
        installs = re.findall(r"(?:microdnf|dnf|yum|apt-get|apk)\s+(?:-\S+\s+)*(?:install|add)\s+([^&;|]*)", run)
        for packages in installs:
            assert not COMPILERS.search(packages), f"compiler or headers installed in the final stage: {packages}"
    assert stages[-1].base == stages[0].base or not COMPILERS.search(stages[-1].base)


def test_exec_form_entrypoint_runs_the_same_serve_command_as_the_deployment(stages: list[Stage], overlays) -> None:
    final = stages[-1]
    entrypoint = exec_form(final.all("ENTRYPOINT")[-1])
    assert entrypoint[0].endswith("/mpijob-webhook")
    command = exec_form(final.all("CMD")[-1])
    container = find(overlays["cert-manager"], "Deployment", "mpijob-webhook")["spec"]["template"]["spec"]["containers"][0]
    assert command == container["args"]
    parsed = build_parser().parse_args(command)
    assert parsed.command == "serve" and not parsed.dev


def test_dockerignore_keeps_secrets_and_the_work_tree_out() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert patterns[0] == "**", "everything is excluded unless listed"
    included = {p[1:] for p in patterns if p.startswith("!")}
    assert included == {"pyproject.toml", "README.md", "certs", "policies", "webhook"}
    assert {"**/*.key", "**/*.pem"} <= set(patterns)
