import pytest

from policies.interface import Problem
from policies.rules.slots_per_worker import SlotsPerWorker
from policies.registry import default_settings
from testing.builders import context, mpijob

RULE = SlotsPerWorker()


@pytest.mark.parametrize("slots", [1, 4, 8, None], ids=lambda s: f"slots={s}")
def test_within_range_is_clean(slots):
    assert list(RULE.check(context(mpijob(slots=slots)))) == []


@pytest.mark.parametrize(("slots", "fix"), [(0, 1), (9, 8), (-3, 1), (64, 8)], ids=["zero", "nine", "negative", "huge"])
def test_out_of_range_names_value_range_and_fix(slots, fix):
    (finding,) = RULE.check(context(mpijob(slots=slots)))
    assert finding.rule == "slots-per-worker"
    assert finding.path == "spec.slotsPerWorker"
    assert finding.problem is Problem.INVALID
    assert finding.value == slots
    assert "between 1 and 8" in finding.message
    assert f"set spec.slotsPerWorker to {fix}" in finding.message


def test_admin_range_is_honoured():
    settings = default_settings().with_rule("slots-per-worker", max=2)
    (finding,) = RULE.check(context(mpijob(slots=4), settings=settings))
    assert "between 1 and 2" in finding.message
