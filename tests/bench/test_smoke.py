"""The benchmark harness still runs end to end (servers, cluster, load generator, report) in its
smoke mode. Numbers from windows of 0.02 s with two clients mean nothing: only the shape of the
report is checked, never the performance targets."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from policies import registry
from webhook.watch_caches import KINDS

ENDPOINTS = ["/validate", "/mutate", "/convert"]


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


# Through the one dispatcher in this process: the servers, the API server and the load generator
# are processes of their own all the same, and no interpreter starts only to import what this one has.
def test_smoke_run_reports_every_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.__main__ import main

    out = tmp_path / "report.json"
    assert main(["run", "--smoke", "--quiet", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())

    main = [(row["endpoint"], row["concurrency"]) for row in report["main"]]
    assert main == [(endpoint, 2) for endpoint in ENDPOINTS]  # two clients: the smoke plan's concurrency
    for row in report["main"] + report["payloads"]:
        assert _finite(row["throughput_ratio"]) and row["throughput_ratio"] > 0, row
        assert _finite(row["p99_ratio"]) and row["p99_ratio"] > 0, row
        assert row["ours"]["errors"] == 0 and row["floor"]["errors"] == 0
        assert row["ours"]["api_reads"] == 0  # answering never calls the API server
        # One pair of windows in the smoke plan; the pooled ratio is a weighted mean of the pairs'.
        assert len(row["pair_ratios"]) == len(row["pair_p99_ratios"]) == 1, row
        assert min(row["pair_ratios"]) - 1e-9 <= row["throughput_ratio"] <= max(row["pair_ratios"]) + 1e-9, row
    assert [row["payload"] for row in report["payloads"]] == ["large-job", "large-job", "50 objects to v1alpha2"]
    assert report["main"][0]["note"].startswith("allowed, 2 warnings")  # the policy did its work

    assert [row["label"] for row in report["namespaces"]] == ["5"]  # the main server only: no second cluster
    assert [row["label"] for row in report["worker_counts"]] == ["2 workers", "100 workers"]
    assert [row["label"] for row in report["rules"]] == ["0", str(len(registry.RULES))]  # none, and every rule
    for row in report["namespaces"] + report["worker_counts"] + report["rules"]:
        assert _finite(row["stats"]["throughput"]) and row["stats"]["throughput"] > 0, row
        assert _finite(row["stats"]["p99_ms"]), row

    replica = report["replica"]
    # one watch per cached kind per worker process (the benchmark cluster serves every kind)
    assert replica["watches"] == len(KINDS) * int(replica["layout"].split()[0])
    assert replica["rss_mib"] > 0
    assert replica["api_reads_during_load"] == 0 and replica["load_phases"] > 0
    assert "| /validate | upstream examples | 2 |" in printed  # the printed tables


def test_a_run_needs_at_least_one_pair_of_windows(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.run import main

    with pytest.raises(SystemExit) as exited:
        main(["--smoke", "--pairs", "0"])
    assert exited.value.code == 2 and "--pairs must be at least 1" in capsys.readouterr().err


def test_one_dispatcher_runs_every_view(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.__main__ import main

    assert main([]) == 2 and "bench profile [--mode {calls,overhead,parts,instructions,served-instructions}]" in capsys.readouterr().err
    assert main(["profile", "--mode", "flame"]) == 2
    assert "--mode must be one of calls, overhead, parts, instructions, served-instructions, not 'flame'" in capsys.readouterr().err
    for mode in ("overhead", "parts", "instructions", "served-instructions"):
        with pytest.raises(SystemExit):
            main(["profile", f"--mode={mode}", "--help"])
        assert f"usage: python3 -m bench profile --mode {mode}" in capsys.readouterr().out


def test_a_sides_windows_pool_into_one_measurement() -> None:
    from bench.load import Result
    from bench.run import pooled

    first = Result(latencies=[0.001] * 98 + [0.5, 0.5], cpu_seconds=0.2, window=2.0)
    second = Result(latencies=[0.002] * 300, cpu_seconds=0.4, window=3.0)
    stats = pooled([(first, 0.1, 0), (second, 0.3, None)])
    assert stats.requests == 400 and stats.throughput == 80.0  # 400 requests over 5 seconds
    assert stats.server_cpu_ms == 1.0  # 0.4 s of server CPU over 400 requests
    assert stats.p50_ms == 2.0 and stats.p99_ms == 2.0  # the two slow ones are under 1 % of the pool
    assert stats.client_cpu == pytest.approx(0.12) and stats.api_reads == 0


# The in-process views run in this process, through the one dispatcher: no interpreter start.
def test_overhead_compares_each_endpoint_with_the_floor(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.__main__ import main

    assert main(["profile", "--mode", "overhead", "--requests", "14", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ENDPOINTS
    for line in lines:
        floor, ours, added = (float(line.split(label)[1].split()[0]) for label in ("floor", "ours", "added"))
        assert floor > 0 and ours > 0 and abs(added - (ours - floor)) <= 1, line  # rounding


def test_parts_says_what_switching_off_each_part_saves(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.__main__ import main

    assert main(["profile", "--mode", "parts", "--requests", "3", "--rounds", "1"]) == 0
    stdout = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in stdout.splitlines() if line.startswith("| ")}
    from bench.parts import WORKLOAD_BUILT_AHEAD

    expected = {"the audit log and metrics", "every rule", "every mutation", "the cluster-aware rules together",
                "the spec-only rules together", "the nesting guard on the body", "the shape check",
                "the shape check of the fields mutations touch", WORKLOAD_BUILT_AHEAD,
                *(f"rule {r.id}" for r in registry.RULES),
                *(f"mutation {m.id}" for m in registry.MUTATIONS)}
    assert set(rows) - {"switched off"} == expected
    headings = [line for line in stdout.splitlines() if line.startswith("## ")]
    assert [h.split(":")[0] for h in headings] == ["## /validate", "## /mutate"]
    for heading in headings:
        ours, floor, added = (float(heading.split(label)[1].split()[0]) for label in (": ", "the floor ", "so "))
        assert ours > 0 and floor > 0 and abs(added - (ours - floor)) <= 1, heading


def test_each_part_is_switched_off_for_its_round_and_back_on_after_it() -> None:
    from bench.parts import WORKLOAD_BUILT_AHEAD, variants
    from bench.profile import app_client, cluster_view

    from policies import engine
    from policies.mpijob import workload_builder
    from policies.workload import workload_of
    from webhook import review

    admission = app_client(cluster_view()[0]).application.extensions["mpijob-webhook"].admission
    checks = (review._nested_deeper_than, engine.check_shape, engine.check_mutation_shape,
              workload_builder.mpijob_workload)
    job = {"metadata": {"name": "pi"}, "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}}
    assert workload_of(job, "a") is not workload_of(dict(job), "a")
    served = (admission.rules, admission.mutations, list(admission.observers), checks)
    malformed = {"spec": {"slotsPerWorker": "two"}}
    assert review._nested_deeper_than(b"[[[]]]", 1) and engine.check_shape(malformed)
    assert engine.check_mutation_shape(malformed, registry.MUTATIONS) == []  # not a field mutations touch
    assert engine.check_mutation_shape({"spec": []}, registry.MUTATIONS)
    for endpoint, every in (("/validate", registry.RULES), ("/mutate", registry.MUTATIONS)):
        for name, switch_off in variants(endpoint).items():
            switch_back = switch_off(admission)
            parts = admission.rules if endpoint == "/validate" else admission.mutations
            if name == "the nesting guard on the body":
                assert not review._nested_deeper_than(b"[[[]]]", 1), name
            elif name == "the shape check":
                assert engine.check_shape(malformed) == [], name
            elif name == "the shape check of the fields mutations touch":
                assert engine.check_mutation_shape({"spec": []}, registry.MUTATIONS) == [], name
            elif name == WORKLOAD_BUILT_AHEAD:  # built once, handed out again for the same name
                view = workload_of(job, "a")
                assert workload_of(dict(job), "a") is view and view.workers.pods == 2, name
                assert workload_of(job, "b") is not view and workload_of({"metadata": {"name": "pj"}}, "a") is not view
            elif name.startswith(("rule ", "mutation ")):
                part_id = name.split(" ", 1)[1]
                assert [p.id for p in parts] == [p.id for p in every if p.id != part_id], name
            elif name == "the audit log and metrics":
                assert admission.observers == [], name
            elif name:
                assert len(parts) < len(every), name
            switch_back()
            now = (review._nested_deeper_than, engine.check_shape, engine.check_mutation_shape,
                   workload_builder.mpijob_workload)
            assert (admission.rules, admission.mutations, list(admission.observers), now) == served, name


CALLGRIND_OUT = """# callgrind format
version: 1
creator: callgrind-3.19.0
cmd: python3 -m bench.instructions --child ours /validate 300
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
fn=(1) main
1 5 2 1 0 0 0 0 0 0
summary: 4631172736 1329163018 752050988 61190710 42979424 11706138 30513 154504 944092
totals: 4631172734 1329163018 752050988 61190709 42979424 11706138 30512 154504 944092
"""


def test_instructions_per_request_are_the_difference_of_two_runs_over_the_requests() -> None:
    from bench.instructions import PerRequest, counts

    busy = counts(CALLGRIND_OUT)
    assert busy["Ir"] == 4631172736 and busy["D1mw"] == 11706138  # the summary line, by event name
    idle = {**busy, "Ir": busy["Ir"] - 600, "I1mr": busy["I1mr"] - 30, "D1mr": busy["D1mr"] - 9, "D1mw": busy["D1mw"] - 3}
    assert PerRequest.between(idle, busy, 3) == PerRequest(instructions=200, instruction_cache_misses=10,
                                                           data_cache_misses=4)
    with pytest.raises(ValueError, match="not a callgrind output"):
        counts("events: Ir Dr\nsummary: 1\n")
