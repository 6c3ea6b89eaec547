"""docs/trainer.md's examples are what the webhook does: the `check` session runs as written
(the files it shows, the output it shows), the messages it quotes are the rules' own, the
policy and ServiceAccount snippets say what the page says they do."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from policies.config.reader import parse_policy
from tests.conftest import ROOT
from tests.policies.trainer.trainer_data import runtime, trainjob
from webhook.cli import main

PAGE = (ROOT / "docs" / "trainer.md").read_text()
ELIDED = "…"


def blocks(info: str) -> list[str]:
    """The fenced code blocks of the page with this info string ("" for none), their lines
    unindented as far as their fence is (a block inside a list item)."""
    found, current, indent, kind = [], None, "", ""
    for line in PAGE.splitlines():
        fence = re.fullmatch(r"( *)```(\S*)", line)
        if current is None and fence:
            current, indent, kind = [], fence.group(1), fence.group(2)
        elif current is not None and fence and fence.group(1) == indent and not fence.group(2):
            if kind == info:
                found.append("".join(f"{text}\n" for text in current))
            current = None
        elif current is not None:
            current.append(line.removeprefix(indent))
    return found


def shown_file(name: str) -> str:
    """The YAML the page shows as the file ``name`` (a "`name`:" line, then the block)."""
    match = re.search(rf"^`{re.escape(name)}`:\n\n```yaml\n(.*?)^```$", PAGE, flags=re.S | re.M)
    assert match, f"docs/trainer.md shows no {name}"
    return match.group(1)


def session(runtime_given: bool = True) -> tuple[list[str], list[str]]:
    """The console block of `check` on the shown files (``runtime_given``: with the runtime, or
    the one without it): the command's words, and its output."""
    (block,) = [b for b in blocks("console") if b.startswith("$ mpijob-webhook check ")
                and ("runtime-not-given" not in b) is runtime_given]
    command, *output = block.splitlines()
    return command.removeprefix("$ mpijob-webhook ").split(), output


def test_the_check_session_without_the_runtime_runs_as_written(tmp_path, capsys, monkeypatch):
    (tmp_path / "trainjob.yaml").write_text(yaml.safe_dump(trainjob(numNodes=4)))
    monkeypatch.chdir(tmp_path)
    args, output = session(runtime_given=False)
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines() == output


def test_the_check_session_runs_as_written(tmp_path, capsys, monkeypatch):
    for name in ("trainjob.yaml", "runtime.yaml"):
        (tmp_path / name).write_text(shown_file(name))
    monkeypatch.chdir(tmp_path)
    args, output = session()
    assert main(args) == 1
    assert capsys.readouterr().out.splitlines() == output


def test_the_runtime_fixed_as_the_page_says_is_admitted(tmp_path, capsys, monkeypatch):
    fixed = shown_file("runtime.yaml").replace('numProcPerNode: "4"', "numProcPerNode: 4") \
        .replace("sshAuthMountpath", "sshAuthMountPath")
    (tmp_path / "trainjob.yaml").write_text(shown_file("trainjob.yaml"))
    (tmp_path / "runtime.yaml").write_text(fixed)
    monkeypatch.chdir(tmp_path)
    assert "With `numProcPerNode: 4` and `sshAuthMountPath` spelt right, the same command admits the TrainJob." \
        in PAGE
    args, _ = session()
    assert main([*args, "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["decision"] for r in report["results"]] == ["admitted", "ignored"]
    assert report["results"][1]["pruned"] == []


def test_both_command_forms_run(tmp_path, capsys, monkeypatch):
    """The page's two `check` command lines, with the runtime beside the TrainJob or in the cluster state."""
    (command_block,) = [b for b in blocks("") if b.startswith("mpijob-webhook check ")]
    runtime_text = shown_file("runtime.yaml").replace('"4"', "4").replace("sshAuthMountpath", "sshAuthMountPath")
    (tmp_path / "trainjob.yaml").write_text(shown_file("trainjob.yaml"))
    (tmp_path / "runtime.yaml").write_text(runtime_text)
    (tmp_path / "cluster.yaml").write_text(runtime_text)
    monkeypatch.chdir(tmp_path)
    for line in command_block.splitlines():
        assert main([*line.removeprefix("mpijob-webhook ").split(), "-o", "json"]) == 0, line
        assert json.loads(capsys.readouterr().out)["results"][0]["decision"] == "admitted", line


def _runtime_with(path: str, **ml_policy: object) -> dict:
    rt = runtime(path)
    rt["spec"]["mlPolicy"].update(ml_policy)
    return rt


# The situations the page's message examples come from, in the page's order.
MESSAGE_CASES = [
    (trainjob(numNodes=120), runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")),
    (trainjob("openmpi-cuda", numNodes=4), _runtime_with("runtimes/opendatahub/openmpi_cuda.yaml", numNodes=2)),
    (trainjob(name="a" * 45, numNodes=4), runtime("runtimes/v2.3.0/deepspeed_distributed.yaml")),
]


def message_examples() -> list[str]:
    (block,) = [b for b in blocks("") if "spec.trainer.numNodes: Invalid value: 120" in b]
    return block.splitlines()


def test_the_quoted_messages_are_the_rules_own(tmp_path, capsys):
    examples = message_examples()
    assert len(examples) == len(MESSAGE_CASES)
    for number, (example, (job, rt)) in enumerate(zip(examples, MESSAGE_CASES)):
        path = tmp_path / f"case{number}.yaml"
        path.write_text(yaml.safe_dump_all([copy.deepcopy(job), rt]))
        main(["check", "-o", "json", str(path)])
        said = [re.sub(r"^\[[a-z-]+\] ", "", f["message"]) for f in
                json.loads(capsys.readouterr().out)["results"][0]["findings"]]
        pattern = ".*".join(re.escape(part) for part in example.split(ELIDED))
        assert any(re.fullmatch(pattern, line) for line in said), (example, said)


def test_the_api_shape_snippet_pins_the_shape():
    (snippet,) = [b for b in blocks("yaml") if "apiShape:" in b]
    assert parse_policy(snippet).settings.params("training-runtime").api_shape == "v2.1"


def test_the_service_account_snippet_turns_the_token_off():
    (snippet,) = [b for b in blocks("yaml") if "kind: ServiceAccount" in b]
    account = yaml.safe_load(snippet)
    assert (account["kind"], account["automountServiceAccountToken"]) == ("ServiceAccount", False)


@pytest.mark.parametrize("runtime_path", ["runtimes/v2.3.0/deepspeed_distributed.yaml",
                                          "runtimes/opendatahub/openmpi_cuda.yaml"])
def test_the_name_limit_the_page_states_holds_for_the_usual_runtimes(tmp_path, capsys, runtime_path):
    limit = int(re.search(r"\*\*at most (\d+) characters\*\* for the usual runtime", PAGE).group(1))
    rt = runtime(runtime_path)
    decisions = []
    for length in (limit, limit + 1):
        path = tmp_path / f"name{length}.yaml"
        path.write_text(yaml.safe_dump_all([trainjob(rt["metadata"]["name"], name="a" * length, numNodes=4), rt]))
        main(["check", "-o", "json", str(path)])
        result = json.loads(capsys.readouterr().out)["results"][0]
        decisions.append((result["decision"], [f["rule"] for f in result["findings"]]))
    assert decisions == [("admitted", []), ("denied", ["job-name"])]
