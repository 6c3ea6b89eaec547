"""The README's quickstart stays true: two commands, the second is exactly what CI runs, and the
curl example names a file, port and CA path that exist as written."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from tests.conftest import ROOT
from webhook.bootstrap import ServeOptions
from webhook.cli import build_parser
from webhook.commands.serve import SAMPLE_REVIEW, sample_curl

README = (ROOT / "README.md").read_text()
QUICKSTART = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]


def commands(block: str) -> list[str]:
    return [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.DOTALL)


def test_quickstart_is_exactly_two_commands_each_in_the_checkouts_venv():
    install_and_serve, install_and_test = commands(bash_blocks(QUICKSTART)[0])
    assert install_and_serve == (
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/python -m webhook serve --dev")
    assert install_and_test == (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest")


def test_quickstart_names_its_one_prerequisite():
    assert "Python 3.11 or newer with `venv`" in QUICKSTART and "python3-venv" in QUICKSTART


def test_ci_runs_the_readmes_test_command():
    ci = commands((ROOT / ".ci" / "run").read_text())
    # the README's command first; then only the connection tests again, against the oldest
    # gunicorn pyproject allows (a venv of their own)
    readme = commands(bash_blocks(QUICKSTART)[0])[1]
    assert readme in ci
    after = "\n".join(ci[ci.index(readme) + 1:]).replace("\\\n", " ").splitlines()  # continued lines joined
    assert after[0].startswith("GUNICORN_OLDEST=") and after[1:] and all(
        line.startswith("python3 -m venv .venv-gunicorn-oldest && ") for line in after[1:]), after
    assert "set -euo pipefail" in ci and "export HYPOTHESIS_PROFILE=ci" in ci


def test_curl_example_is_the_line_serve_dev_prints():
    [curl] = commands(bash_blocks(QUICKSTART)[1])
    words = shlex.split(curl)
    ca, sample = Path(words[words.index("--cacert") + 1]), Path(words[words.index("--data") + 1].removeprefix("@"))
    # serve --dev: tempfile.mkdtemp(prefix=…) in /tmp; the sample review of the checkout
    assert re.fullmatch(r"/tmp/mpijob-webhook-dev-\w{8}/ca\.crt", str(ca))
    assert sample.is_absolute() and sample.parts[-2:] == SAMPLE_REVIEW.parts[-2:]
    assert curl == sample_curl(ca, sample, ServeOptions.port)
    review = json.loads(SAMPLE_REVIEW.read_text())
    assert review["kind"] == "AdmissionReview" and review["request"]["uid"]


def test_serve_dev_parses_as_written():
    args = build_parser().parse_args(["serve", "--dev"])
    assert (args.dev, args.port, args.cert_file) == (True, 8443, None)
