"""`bench run --only main --baseline-tree DIR`: another revision's server and floor measured in the
same pairs of windows as ours and our floor. What is checked here costs no server start: the
arguments, the order of the windows, the server's command line and tree, and the rows."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from bench.report import Comparison, Report, Stats, render
from bench.run import main, serves_health_port, turns
from bench.servers import ServerProcess
from tests.conftest import ROOT


def _tree(tmp_path: Path, usage: str) -> Path:
    """A stand-in checkout whose `python -m webhook ...` prints ``usage`` and where it runs from."""
    package = tmp_path / "tree" / "webhook"
    (package / "commands").mkdir(parents=True)
    (package / "commands" / "serve.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import os, sys\n"
        f"print({usage!r})\n"
        "print('module', __file__)\nprint('cwd', os.getcwd())\nprint('argv', ' '.join(sys.argv[1:]))\n")
    return package.parent


def test_a_baseline_is_compared_in_the_main_table_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--smoke", "--baseline-tree", str(ROOT)])
    assert exited.value.code == 2
    assert "--baseline-tree compares the main table only: add --only main" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--smoke", "--only", "main", "payloads", "--baseline-tree", str(ROOT)])
    assert exited.value.code == 2 and "add --only main" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--smoke", "--only", "main", "--baseline-tree", str(tmp_path)])
    assert exited.value.code == 2
    assert f"--baseline-tree {tmp_path}: not a checkout of this project" in capsys.readouterr().err


def test_every_side_is_measured_as_often_before_as_after_each_other() -> None:
    sides = ["floor", "ours", "baseline"]
    assert [turns(pair, sides) for pair in range(3)] == [sides, sides[::-1], sides]
    assert turns(0, ["floor", "ours"]) == ["floor", "ours"] and turns(1, ["floor", "ours"]) == ["ours", "floor"]
    two_pairs = [turns(0, sides), turns(1, sides)]
    for first in sides:
        for second in sides:
            if first != second:
                before = sum(order.index(first) < order.index(second) for order in two_pairs)
                assert before == 1, (first, second)


def test_the_baseline_runs_its_own_trees_modules_with_the_flags_its_serve_has(tmp_path: Path) -> None:
    old = _tree(tmp_path, "usage: mpijob-webhook serve [--port PORT]")
    assert serves_health_port(old) is False
    (old / "webhook" / "__main__.py").write_text("print('usage: serve [--health-port PORT]')\n")
    assert serves_health_port(old) is True
    old = _tree(tmp_path / "again", "usage: mpijob-webhook serve [--port PORT]")

    server = ServerProcess("baseline", ["webhook", "serve", "--policy-file", "p.yaml"], tmp_path, tmp_path / "ca.crt",
                           tree=old, health_port=False)
    assert "--health-port" not in server._args
    server.spawn()
    assert server.process is not None and server.process.wait(30) == 0
    said = dict(line.split(" ", 1) for line in server.output().splitlines()[1:])
    assert said["module"] == str(old / "webhook" / "__main__.py")  # that tree's modules, not this one's
    assert said["cwd"] == str(old)
    assert said["argv"] == f"serve --policy-file p.yaml --host 127.0.0.1 --port {server.port}"
    ours = ServerProcess("serve", ["webhook", "serve"], tmp_path, tmp_path / "ca.crt")
    assert ours._args[:4] == [sys.executable, "-m", "webhook", "serve"]
    assert ours._args[-2:] == ["--health-port", str(ours.health_port)]


def _stats(throughput: float, p99_ms: float) -> Stats:
    return Stats(requests=100, throughput=throughput, p50_ms=p99_ms / 2, p95_ms=p99_ms, p99_ms=p99_ms, errors=0,
                 server_cpu_ms=0.5, client_cpu=0.3)


def test_a_row_with_a_baseline_has_both_ratios_to_the_same_floor() -> None:
    row = Comparison("/validate", "upstream examples", 8, ours=_stats(600, 3), floor=_stats(1000.0, 2.0),
                     note="allowed, 2 warnings", pair_ratios=(0.55, 0.65), baseline=_stats(500, 4),
                     baseline_note="allowed, 2 warnings", baseline_pair_ratios=(0.45, 0.55),
                     baseline_floor=_stats(800.0, 2.0), baseline_own_pair_ratios=(0.6, 0.65))
    numbers = row.to_dict()
    assert numbers["throughput_ratio"] == 0.6 and numbers["baseline_throughput_ratio"] == 0.5
    assert numbers["p99_ratio"] == 1.5 and numbers["baseline_p99_ratio"] == 2.0
    assert numbers["baseline_own_ratio"] == 0.625  # the ratio its own run would report: to its floor
    assert numbers["baseline"]["throughput"] == 500 and numbers["baseline_pair_ratios"] == (0.45, 0.55)
    plain = Comparison("/mutate", "upstream examples", 8, ours=_stats(600, 3), floor=_stats(1000.0, 2.0))
    assert "baseline_throughput_ratio" not in plain.to_dict() and math.isnan(plain.baseline_throughput_ratio)

    report = Report(settings={"baseline": "/tmp/before"}, main=[row])
    text = render(report)
    assert "## ours vs the baseline (/tmp/before): each against our floor, and the baseline against its own" in text
    assert ("| /validate | upstream examples | 8 | 1,000 | 0.60 | 0.55 to 0.65 | 0.50 | 0.45 to 0.55 | 1.50 | 2.00 "
            "| 0.50 | 0.50 | 800 | 0.62 | 0.60 to 0.65 | 0.50 | 0.50 |") in text
    assert "ours vs the baseline" not in render(Report(main=[plain]))

