"""``bench e2e`` keeps working: its arithmetic on made-up windows, its answer without a control
plane, and (with ``KUBEBUILDER_ASSETS``) a smoke run on a real API server: every way of admitting
the job registered in turn, the probe showing each in effect, a few requests each. The numbers of
the smoke run mean nothing; only the report's shape is checked, never the target."""
from __future__ import annotations

import re

import pytest

from bench.e2e import WAYS, Measurements, Plan, main, render
from bench.load import Result
from testing.control_plane import ASSETS_VARIABLE, SKIP_REASON, assets


def _window(*milliseconds: float) -> tuple[Result, float, int | None]:
    return Result(latencies=[m / 1000 for m in milliseconds], window=1.0), 0.0, None


def test_each_way_is_measured_from_none_and_ours_against_the_bare_webhook() -> None:
    measurements = Measurements()
    for round_ in range(2):  # two rounds of windows, pooled
        measurements.add("none", 1, _window(*[2.0] * 98, 10.0, 10.0), 0.1)  # API server: 0.1 s for 100
        measurements.add("policies", 1, _window(*[2.5] * 98, 11.0, 11.0), 0.3)
        measurements.add("bare", 1, _window(*[3.0 + round_] * 98, 20.0, 20.0), 0.2)  # adds 1 then 2 at p50
        measurements.add("ours", 1, _window(*[5.0] * 98, 22.0, 22.0), 0.2)
    table = render(measurements, Plan(rounds=2, seconds=1, warmup=0, concurrency=(1,)), {"X y": "why"})

    assert "| 1 | none | 200 | 2.00 | 10.00 | | |  |  | 1.00 |" in table
    assert "| 1 | policies | 200 | 2.50 | 11.00 | 0.50 | 1.00 | 0.50 (0.50 to 0.50) |  | 3.00 |" in table
    # pooled: the 100th of 200 latencies (nearest rank) is the second round's 4.0
    assert "| 1 | bare | 200 | 4.00 | 20.00 | 2.00 | 10.00 | 1.50 (1.00 to 2.00) | 0.00 | 2.00 |" in table
    assert "| 1 | ours | 200 | 5.00 | 22.00 | 3.00 | 12.00 | 3.00 (3.00 to 3.00) | 0.00 | 2.00 |" in table
    assert "c=1: ours adds 1.50x (p50) and 1.20x (p99) what the bare webhook adds; target at most 1.25x: NOT met" in table
    assert "- X y: why" in table


def test_no_ratio_to_an_addition_the_noise_drowned() -> None:
    measurements = Measurements()
    measurements.add("none", 8, _window(5.0, 9.0), 0.0)
    measurements.add("policies", 8, _window(5.0, 9.0), 0.0)
    measurements.add("bare", 8, _window(4.0, 8.0), 0.0)  # faster than none: noise
    measurements.add("ours", 8, _window(6.0, 9.5), 0.0)
    table = render(measurements, Plan(rounds=1, seconds=1, warmup=0, concurrency=(8,)), {})
    assert ("c=8: ours adds 1.00 / 0.50 ms (p50 / p99), the bare webhook -1.00 / -1.00: no ratio, "
            "the bare webhook's addition is below this run's noise") in table


def test_without_the_binaries_it_says_what_to_set(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(ASSETS_VARIABLE, raising=False)
    assert main(["--smoke"]) == 2
    assert f"set {ASSETS_VARIABLE} to a folder holding etcd, kube-apiserver, kube-controller-manager" in \
        capsys.readouterr().err


@pytest.mark.skipif(assets() is None, reason=SKIP_REASON)
def test_smoke_run_on_a_real_api_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--smoke"]) == 0
    printed = capsys.readouterr().out
    for concurrency in (1, 2):  # the smoke plan's
        for way in WAYS:
            assert re.search(rf"^\| {concurrency} \| {way} \| \d+ \|", printed, re.MULTILINE), (way, printed)
        assert re.search(rf"^c={concurrency}: ours adds ", printed, re.MULTILINE), printed
    refused = re.search(r"refused by the API server when created \((\d+);", printed)
    if refused:  # every refused object named with the API server's reason
        named = re.findall(r"^- ValidatingAdmissionPolicy(?:Binding)? mpijob-webhook-[a-z-]+: .+$", printed, re.MULTILINE)
        assert len(named) == int(refused.group(1)), printed
