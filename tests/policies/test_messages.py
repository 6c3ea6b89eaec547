"""How a finding's value reads: apimachinery's field-error form, strings as JSON."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from policies import messages
from policies.base import Finding, Problem


@given(st.text() | st.booleans() | st.none())
def test_strings_booleans_and_null_read_as_json_keeping_non_ascii(value) -> None:
    assert messages.render_value(value) == json.dumps(value, ensure_ascii=False)


def test_numbers_read_bare_and_a_value_starts_the_message() -> None:
    assert messages.render_value(9) == "9"
    assert messages.render_value(2.5) == "2.5"
    finding = Finding("slots-per-worker", "spec.slotsPerWorker", "must be at most 8", Problem.INVALID, "größe\n")
    assert messages.line(finding) == '[slots-per-worker] spec.slotsPerWorker: Invalid value: "größe\\n": must be at most 8'
