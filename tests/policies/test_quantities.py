"""``policies.kube.quantities.parse_quantity`` against ``kubernetes.utils.parse_quantity``, its oracle.

Ours is the one parser on the request path (the library's makes a Decimal power on every call);
it must answer exactly as the library does: the same Decimal (sign, digits and exponent, not
only an equal value) and a ValueError with the same message for every input it refuses.
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as library_parse_quantity

from policies.kube.quantities import BadQuantity, parse_quantity, quantity, quantity_or_none

SUFFIXES = ["", "n", "u", "m", "k", "K", "M", "G", "T", "P", "E",
            "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
            "ki", "mi", "ni", "ui", "i", "e", "Kb", "KI", "k8", "Gii", "iG", " Gi", "Gi "]
NUMBERS = st.one_of(
    st.integers(-10**30, 10**30).map(str),
    st.decimals(allow_nan=False, allow_infinity=False).map(str),
    st.from_regex(r"\A[+-]?[0-9]{0,6}(\.[0-9]{0,6})?([eE][+-]?[0-9]{1,4})?\Z", fullmatch=True),
    st.sampled_from(["", ".", "-", "+", "Infinity", "-inf", "NaN", "sNaN", "nan", "1_000", " 1 ",
                     "0x10", "1e999999", "1e-999999", "9" * 40, "1e", "١٢"]),
)
GARBAGE = st.text(alphabet=st.sampled_from("0123456789.+-eEiKkMmGgTPnu_ x\u0661"), max_size=12)


def outcome(parse, value):
    """(the Decimal's tuple, None) or (None, the refusal's type and message)."""
    try:
        parsed = parse(value)
    except Exception as exc:  # noqa: BLE001 - which exception is part of what is compared
        return None, (type(exc), str(exc))
    assert type(parsed) is Decimal
    return parsed.as_tuple(), None


@given(NUMBERS, st.sampled_from(SUFFIXES))
@settings(max_examples=600)
@example("500", "m")
@example("4", "Gi")
@example("1.5", "Ei")
@example("-0", "n")
@example("1e999999999", "E")  # the product overflows: refused by both
@example("sNaN", "")
@example("sNaN", "k")
def test_number_and_suffix_as_the_library_parses_them(number, suffix):
    text = number + suffix
    assert outcome(parse_quantity, text) == outcome(library_parse_quantity, text)


@given(GARBAGE)
@settings(max_examples=600)
def test_any_text_as_the_library_parses_it(text):
    assert outcome(parse_quantity, text) == outcome(library_parse_quantity, text)


@given(st.integers())
def test_json_integers_as_the_library_parses_them(value):
    assert outcome(parse_quantity, value) == outcome(library_parse_quantity, value)


@given(st.one_of(st.booleans(), st.floats(), st.decimals()))
def test_other_numbers_as_the_library_parses_them(value):
    assert outcome(parse_quantity, value) == outcome(library_parse_quantity, value)


def test_the_suffixes_multiply_as_the_api_server_says():
    assert parse_quantity("500m") == Decimal("0.5")
    assert parse_quantity("4Gi") == 4 * 1024**3
    assert parse_quantity("2k") == parse_quantity("2K") == 2000
    assert parse_quantity("1Ei") == 1024**6
    assert parse_quantity("3n") == Decimal("3e-9")


@pytest.mark.parametrize("text", ["5ki", "5mi", "5i", "Gi", "", "1.2.3", "4GB", "1e999999999E"])
def test_what_the_library_refuses_is_refused(text):
    with pytest.raises(ValueError):
        library_parse_quantity(text)
    with pytest.raises(ValueError):
        parse_quantity(text)
    with pytest.raises(BadQuantity):
        quantity(text)
    assert quantity_or_none(text) is None
