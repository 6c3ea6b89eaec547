"""The TrainJob benchmark payloads: each MPIJob twin runs the same pods as its TrainJob, and the
overhead view measures TrainJobs beside their twins and the runtime read, in this process."""
from __future__ import annotations

import json

import pytest

from bench.payloads import mpijob_twins, trainer_runtimes, trainjobs
from policies.mpijob.workload_builder import mpijob_workload
from policies.trainer.api import detect_shape
from policies.trainer.effective_job import effective_job
from policies.trainer.trainjob_workload import trainjob_workload


@pytest.mark.parametrize("name", sorted(trainjobs()))
def test_each_twin_runs_the_pods_of_its_trainjob(name: str) -> None:
    job, twin = trainjobs()[name], mpijob_twins()[f"mpijob-twin-of-{name}"]
    runtimes = {rt["metadata"]["name"]: rt for rt in trainer_runtimes()}
    effective = effective_job(job, runtimes[job["spec"]["runtimeRef"]["name"]], detect_shape(job))
    as_trainjob, as_mpijob = trainjob_workload(job, effective, "team"), mpijob_workload(twin, "team")
    assert (as_mpijob.launcher.pods, as_mpijob.workers.pods, as_mpijob.slots.value) == \
        (as_trainjob.launcher.pods, as_trainjob.workers.pods, as_trainjob.slots.value)
    assert json.dumps(as_mpijob.workers.template, sort_keys=True) == json.dumps(as_trainjob.workers.template, sort_keys=True)
    assert json.dumps(as_mpijob.launcher.template, sort_keys=True) == json.dumps(as_trainjob.launcher.template, sort_keys=True)


def test_overhead_puts_each_trainjob_beside_its_twin(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.__main__ import main

    assert main(["profile", "--mode", "overhead", "--trainjobs", "--requests", "5", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split()[:2] for line in lines[:-1]]
    assert rows == [[endpoint, payload] for endpoint in ("/validate", "/mutate") for payload in (
        "3", "mpijob-twin-of-trainjob-deepspeed", "trainjob-deepspeed",
        "mpijob-twin-of-trainjob-odh-benchmark", "trainjob-odh-benchmark")]
    assert lines[-1].startswith("reading a TrainJob's runtime from the watch cache") and lines[-1].endswith(" µs")


def test_instructions_count_each_trainjob_row_between_two_markers(tmp_path) -> None:
    from bench.instructions import dumped_counts, trainjob_child, trainjob_report
    from bench.overhead import TRAINJOB_ROWS

    markers: list[int] = []
    trainjob_child(["/validate", "/mutate"], 1, 0, lambda: markers.append(1))  # in this process, no valgrind
    assert len(markers) == 2 * len(TRAINJOB_ROWS) + 1  # one before each row, one after the last
    # what callgrind leaves: one file per marker (start-up first), then the exit's
    for part, instructions in enumerate((900, 30, 60, 99), start=1):
        (tmp_path / f"out.{part}").write_text(f"events: Ir\nsummary: {instructions}\n")
    (tmp_path / "out").write_text("events: Ir\nsummary: 5\n")
    assert [dump["Ir"] for dump in dumped_counts(tmp_path / "out")] == [900, 30, 60, 99, 5]
    lines = trainjob_report([("/mutate", "the upstream examples", 10.0), ("/mutate", "mpijob-twin-of-trainjob-x", 200.0),
                             ("/mutate", "trainjob-x", 230.0)])
    assert lines[2:] == ["| /mutate | the upstream examples | 10 |  |", "| /mutate | mpijob-twin-of-trainjob-x | 200 |  |",
                         "| /mutate | trainjob-x | 230 | +30 (+15.0%) |"]
