"""The README's quickstart stays true: two commands, the second is exactly what CI runs, and the
curl example names a file, port and CA path that exist as written."""
from __future__ import annotations

import json
import re

from tests.conftest import ROOT
from webhook.bootstrap import ServeOptions
from webhook.cli import build_parser

README = (ROOT / "README.md").read_text()
QUICKSTART = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]


def commands(block: str) -> list[str]:
    return [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.DOTALL)


def test_quickstart_is_exactly_two_commands():
    install_and_serve, install_and_test = commands(bash_blocks(QUICKSTART)[0])
    assert install_and_serve == "python3 -m pip install -e . && python3 -m webhook serve --dev"
    assert install_and_test == "python3 -m pip install -e '.[test]' && python3 -m pytest"


def test_ci_runs_the_readmes_test_command():
    ci = commands((ROOT / ".ci" / "run").read_text())
    assert ci[-1] == commands(bash_blocks(QUICKSTART)[0])[1]
    assert "set -euo pipefail" in ci and "export HYPOTHESIS_PROFILE=ci" in ci


def test_curl_example_names_what_serve_dev_makes():
    curl = " ".join(part.strip(" \\") for part in bash_blocks(QUICKSTART)[1].splitlines())
    ca, sample, url = re.fullmatch(
        r"curl --cacert (\S+) -H 'Content-Type: application/json' --data @(\S+) (\S+)", curl.strip()).groups()
    assert re.fullmatch(r"/tmp/mpijob-webhook-dev-X+/ca\.crt", ca)  # serve --dev: tempfile.mkdtemp(prefix=…)
    assert url == f"https://localhost:{ServeOptions.port}/validate"
    review = json.loads((ROOT / sample).read_text())
    assert review["kind"] == "AdmissionReview" and review["request"]["uid"]


def test_serve_dev_parses_as_written():
    args = build_parser().parse_args(["serve", "--dev"])
    assert (args.dev, args.port, args.cert_file) == (True, 8443, None)
