"""How a finding's value reads: apimachinery's field-error form, strings as JSON."""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from policies import messages
from policies.interface import UNSET, Finding, Problem


@given(st.text() | st.booleans() | st.none())
def test_strings_booleans_and_null_read_as_json_keeping_non_ascii(value) -> None:
    assert messages.render_value(value) == json.dumps(value, ensure_ascii=False)


def test_numbers_read_bare_and_a_value_starts_the_message() -> None:
    assert messages.render_value(9) == "9"
    assert messages.render_value(2.5) == "2.5"
    finding = Finding("slots-per-worker", "spec.slotsPerWorker", "must be at most 8", Problem.INVALID, "größe\n")
    assert messages.line(finding) == '[slots-per-worker] spec.slotsPerWorker: Invalid value: "größe\\n": must be at most 8'


@given(st.sampled_from(list(Problem)), st.text() | st.integers() | st.booleans() | st.none() | st.just(UNSET),
       st.text(max_size=20), st.text(max_size=20))
def test_a_line_is_rule_path_and_body_and_only_field_value_problems_show_the_value(problem, value, path, message):
    finding = Finding("rule-id", path, message, problem, value)
    if problem is Problem.POLICY:
        body = message
    elif value is not UNSET and problem in (Problem.INVALID, Problem.NOT_SUPPORTED, Problem.TYPE_INVALID):
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, (str, bool)) or value is None else str(value)
        body = f"{problem.label}: {shown}: {message}"
    else:
        body = f"{problem.label}: {message}"
    assert messages.body(finding) == body
    assert messages.line(finding) == (f"[rule-id] {path}: {body}" if path else f"[rule-id] {body}")
