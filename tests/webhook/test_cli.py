"""The command line as a newcomer meets it: ``--version``, mistakes answered by the command they
were made in, no guessing of abbreviated options, and a closed pipe that ends quietly."""
from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, UPSTREAM, console_script
from webhook.cli import CLOSED_PIPE_EXIT, build_parser, main

PI = UPSTREAM / "v2beta1" / "pi.yaml"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


def all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases name one parser twice
                yield from all_parsers(sub)


# --- --version --------------------------------------------------------------------------------
def test_version_names_the_installed_release(capsys: pytest.CaptureFixture[str]):
    from importlib.metadata import version

    code, out, err = run_cli(capsys, "--version")
    assert (code, out, err) == (0, f"mpijob-webhook {version('mpijob-webhook')}\n", "")


def test_the_console_script_answers_version_too():
    done = subprocess.run([str(console_script()), "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.split()[0], done.stderr) == (0, "mpijob-webhook", "")


# --- unknown and abbreviated options ----------------------------------------------------------
@pytest.mark.parametrize(("argv", "usage"), [
    (["check", str(PI), "--bogus"], "usage: mpijob-webhook check "),
    (["convert", "--bogus", str(PI)], "usage: mpijob-webhook convert "),
    (["serve", "--dev", "--bogus"], "usage: mpijob-webhook serve "),
    (["certs", "--service", "s", "--namespace", "n", "--out", "x", "--bogus"], "usage: mpijob-webhook certs "),
    (["policy", "schema", "--bogus"], "usage: mpijob-webhook policy schema "),
    (["policy", "show", "f.yaml", "--namespace", "a", "--bogus"], "usage: mpijob-webhook policy show "),
])
def test_an_unknown_option_is_reported_with_its_commands_usage(capsys: pytest.CaptureFixture[str],
                                                               argv: list[str], usage: str):
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith(usage), err
    prog = usage.removeprefix("usage: ").strip()
    assert err.rstrip().endswith(f"{prog}: error: unrecognized arguments: --bogus"), err


def test_an_unknown_option_before_the_command_gets_the_top_level_usage(capsys: pytest.CaptureFixture[str]):
    code, _, err = run_cli(capsys, "--bogus", "check", str(PI))
    assert code == 2 and err.startswith("usage: mpijob-webhook [-h] [--version] COMMAND")


@pytest.mark.parametrize(("argv", "refused"), [
    (["check", "--policy", "x.yaml", str(PI)], "unrecognized arguments: --policy"),  # was --policy-file
    (["check", "--cluster", "x.yaml", str(PI)], "unrecognized arguments: --cluster"),
    (["convert", "--keep", str(PI)], "unrecognized arguments: --keep"),
    (["serve", "--dev", "--work", "0"], "unrecognized arguments: --work 0"),
    (["policy", "show", "f.yaml", "--name", "a"], "the following arguments are required: --namespace"),
    (["--vers"], "the following arguments are required: COMMAND"),  # was --version
])
def test_abbreviated_options_are_not_guessed(capsys: pytest.CaptureFixture[str], argv: list[str], refused: str):
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.rstrip().endswith(f"error: {refused}"), err


def test_no_parser_of_the_command_line_accepts_abbreviations():
    parsers = list(all_parsers(build_parser()))
    assert len(parsers) == 12  # mpijob-webhook, 6 commands, policy's 4 actions, export's 1 kind
    assert [p.prog for p in parsers if p.allow_abbrev] == []


CONSTRUCTOR = "ArgumentParser" + "("  # split, or this file would be one of those it looks for


def argument_parsers_in(path: Path) -> Iterator[ast.Call]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "ArgumentParser":
            yield node


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for folder in ("bench", "tests", "tools", "webhook",
                                                                              "certs", "policies")
                                        for p in (ROOT / folder).rglob("*.py")
                                        if CONSTRUCTOR in p.read_text()))
def test_every_other_argument_parser_refuses_abbreviations(path: str):
    calls = list(argument_parsers_in(ROOT / path))
    assert calls
    for call in calls:
        keywords = {k.arg: k.value for k in call.keywords}
        assert isinstance(keywords.get("allow_abbrev"), ast.Constant) and keywords["allow_abbrev"].value is False, (
            f"{path}:{call.lineno}")


# --- a closed pipe ----------------------------------------------------------------------------
@pytest.mark.parametrize(("output", "first_line"), [("json", b"{\n"), ("text", f"{PI}[0] MPIJob ".encode())])
def test_a_reader_that_stops_early_ends_the_command_quietly(output: str, first_line: bytes):
    """``check -o json … | head -1``: the reader leaves after one line, long before the report
    (several hundred KiB, far more than a pipe holds) is written."""
    command = [sys.executable, "-m", "webhook", "check", "-o", output, *[str(PI)] * 300]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # what head does once it has its line
        err = process.stderr.read().decode()
        code = process.wait(timeout=120)
    assert first.startswith(first_line)
    assert err == ""
    assert code == CLOSED_PIPE_EXIT


def test_the_whole_report_still_ends_normally_without_a_closed_pipe():
    done = subprocess.run([sys.executable, "-m", "webhook", "check", "-o", "json", *[str(PI)] * 300],
                          cwd=ROOT, capture_output=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, b"")
    assert len(done.stdout) > 256 * 1024  # more than any pipe buffers: the test above cannot pass by luck


# --- one message for a file that is not there -------------------------------------------------
MISSING = "no-such-file.yaml"


@pytest.mark.parametrize("argv", [
    ["check", MISSING],
    ["check", "--policy-file", MISSING, str(PI)],
    ["check", "--cluster-state", MISSING, str(PI)],
    ["convert", MISSING],
    ["policy", "validate", MISSING],
    ["policy", "show", MISSING, "--namespace", "team-a"],
    ["serve", "--dev", "--policy-file", MISSING],
    ["serve", "--dev", "--kubeconfig", MISSING],
    ["serve", "--cert-file", MISSING, "--key-file", str(PI)],
    ["serve", "--dev", "--client-ca-file", MISSING],
    ["certs", "--service", "s", "--namespace", "n", "--out", "tls", "--ca-cert", MISSING, "--ca-key", str(PI)],
], ids=lambda argv: " ".join(argv[:3]).replace(MISSING, "FILE").replace(str(PI), "pi.yaml"))
def test_a_missing_file_gets_the_same_message_from_every_command(tmp_path: Path, argv: list[str]):
    done = subprocess.run([sys.executable, "-m", "webhook", *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode != 0
    assert f"{MISSING}: cannot be read: No such file or directory" in done.stderr.splitlines()[-1], done.stderr
    assert "does not exist" not in done.stderr
    assert not list(tmp_path.glob("mpijob-webhook-dev-*"))  # serve --dev took its throwaway key with it


# --- help that tells the whole story ----------------------------------------------------------
def help_text(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    code, out, err = run_cli(capsys, *command, "--help")
    assert (code, err) == (0, "")
    return out


def test_serve_help_names_every_endpoint_with_its_method(capsys: pytest.CaptureFixture[str]):
    from webhook import create_app

    described = " ".join(help_text(capsys, "serve").split())  # as one line: argparse wraps it
    endpoints = {(method, rule.rule) for rule in create_app().url_map.iter_rules() if rule.endpoint != "static"
                 for method in rule.methods - {"HEAD", "OPTIONS"}}
    assert len(endpoints) == 6
    assert sorted(f"{method} {path}" for method, path in endpoints if f"{method} {path}" not in described) == []


# What ``kubectl get`` calls each kind the cluster-state file may hold (kind: List of them).
KUBECTL_RESOURCES = {"resourcequotas": "ResourceQuota", "limitranges": "LimitRange", "nodes": "Node",
                     "namespaces": "Namespace", "localqueues.kueue.x-k8s.io": "LocalQueue",
                     "mpijobs.v2beta1.kubeflow.org": "MPIJob",
                     "clustertrainingruntimes.trainer.kubeflow.org": "ClusterTrainingRuntime",
                     "trainingruntimes.trainer.kubeflow.org": "TrainingRuntime",
                     "trainjobs.trainer.kubeflow.org": "TrainJob"}


def test_check_help_names_every_object_cluster_state_reads_and_how_to_get_them_all(
        capsys: pytest.CaptureFixture[str]):
    from webhook.offline import CLUSTER_KINDS, BadInput, cluster_view

    accepted = [kind for kind in ("ResourceQuota", "LimitRange", "Node", "Namespace", "LocalQueue", "MPIJob",
                                  "ClusterTrainingRuntime", "TrainingRuntime", "TrainJob",
                                  "Pod", "ConfigMap", "ClusterQueue", "PriorityClass", "Job")
                if _accepted_as_cluster_state(kind, cluster_view, BadInput)]
    assert accepted == list(CLUSTER_KINDS)
    text = help_text(capsys, "check")
    for kind in accepted:
        assert f"\n  {kind} " in text, kind
    [kubectl] = [line.strip() for line in text.splitlines() if line.strip().startswith("kubectl get ")]
    words = kubectl.split()
    assert words[3:] == ["-A", "-o", "yaml", ">", "cluster-state.yaml"]
    assert sorted(KUBECTL_RESOURCES[resource] for resource in words[2].split(",")) == sorted(accepted)


def _accepted_as_cluster_state(kind: str, cluster_view, bad_input) -> bool:
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "x", "namespace": "team-a"}}
    try:
        cluster_view([("state.yaml", 0, obj)], "team-a")
    except bad_input:
        return False
    return True


def test_the_policy_page_shows_the_same_kubectl_get_as_check_help(capsys: pytest.CaptureFixture[str]):
    [kubectl] = [line.strip() for line in help_text(capsys, "check").splitlines() if line.strip().startswith("kubectl")]
    command = kubectl.split(" > ", 1)[0]
    assert f"`{command}`" in (ROOT / "docs" / "policy.md").read_text()
