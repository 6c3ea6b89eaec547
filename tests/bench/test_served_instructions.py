"""``bench profile --mode served-instructions``: the served request's count, read from the
worker's per-thread callgrind dumps."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.served_instructions import CASES, IDLE, Counted, PerThread, dump_per_thread, main, per_request, report


def _dump_file(threads_total: int) -> str:
    return (f"# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfn=(1) main\n1 {threads_total}\n"
            f"summary: {threads_total}\ntotals: {threads_total}\n")


def test_one_dumps_threads_are_read_and_no_other_dumps(tmp_path: Path) -> None:
    for name, total in {"out.77.1-01": 5, "out.77.2-01": 600, "out.77.2-02": 300, "out.77.2-10": 60,
                        "out.77.12-01": 9, "out.78.2-01": 7, "out.77": 1, "out.77-01": 2}.items():
        (tmp_path / name).write_text(_dump_file(total))
    assert dump_per_thread(tmp_path, "out.77", 2) == {1: 600, 2: 300, 10: 60}
    assert dump_per_thread(tmp_path, "out.77", 3) == {}


def test_the_event_loop_is_the_main_thread_and_a_request_is_the_dump_over_n() -> None:
    assert per_request({1: 600, 2: 300, 10: 60}, 3) == PerThread(event_loop=200, other_threads=120)
    assert per_request({1: 600, 2: 300, 10: 60}, 3).total == 320
    with pytest.raises(ValueError, match="no main thread"):
        per_request({2: 300}, 3)


def test_the_report_has_a_row_per_case_and_the_idle_row() -> None:
    lines = report({"validate-c1": Counted(60, 2.34, PerThread(244_083.4, 2_119_825.0)),
                    IDLE: Counted(10, 10.3, PerThread(23_950.0, 252_592.0))})
    assert lines == ["| case | N | seconds | event loop | other threads | whole worker |",
                     "|---|---|---|---|---|---|",
                     "| validate-c1 | 60 | 2.3 | 244,083 | 2,119,825 | 2,363,908 |",
                     "| idle, per second | 10 | 10.3 | 23,950 | 252,592 | 276,542 |"]


@pytest.mark.parametrize(("argv", "error"), [
    (["validate-c2"], "unknown case validate-c2; choose from validate-c1, validate-c8, mutate-c8, convert-c8"),
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--tree", "/"], "--tree /: not a checkout of this project (no webhook/commands/serve.py)"),
])
def test_bad_arguments_are_refused_with_the_reason(argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and error in capsys.readouterr().err


def test_the_cases_are_the_main_tables_endpoints_at_one_and_eight_connections() -> None:
    assert {name: (case.endpoint, case.connections) for name, case in CASES.items()} == {
        "validate-c1": ("/validate", 1), "validate-c8": ("/validate", 8), "mutate-c8": ("/mutate", 8),
        "convert-c8": ("/convert", 8)}


@pytest.mark.ci_only
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_a_served_request_is_counted_under_callgrind(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate-c1", "--rounds", "2"]) == 0
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]}
    assert set(rows) == {"validate-c1", IDLE}
    requests, event_loop, whole = int(rows["validate-c1"][1]), *(int(rows["validate-c1"][i].strip(" |").replace(",", ""))
                                                                 for i in (3, 5))
    assert requests == 6  # two rounds of the three upstream examples
    # a /validate is about 2.4 million instructions served, some 10 % of them on the event loop
    assert 1_000_000 < whole < 10_000_000 and 20_000 < event_loop < whole / 2
