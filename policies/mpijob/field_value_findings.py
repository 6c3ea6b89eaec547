"""Findings several rules produce the same way: a value outside a fixed set of choices, and a
number that must not be negative. One wording for all, in the API server's own terms."""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from policies.interface import Finding, Problem


def quoted(values: Iterable[str]) -> str:
    """``"Never", "OnFailure"``: the way apimachinery lists supported values."""
    return ", ".join(f'"{v}"' for v in values)


def closest_choice(value: str, choices: Sequence[str]) -> str | None:
    """The choice the user meant when only case or surrounding spaces differ, or None."""
    for choice in choices:
        if choice.casefold() == value.strip().casefold():
            return choice
    return None


def likely_typo(value: str, choices: Sequence[str]) -> str | None:
    matches = difflib.get_close_matches(value, choices, n=1, cutoff=0.8)
    return matches[0] if matches else None


def not_supported(rule: str, path: str, value: str, choices: Sequence[str], *, why: str = "") -> Finding:
    """``Unsupported value: "running": supported values: "All", "Running", "None"; use "Running" …``.

    ``why`` explains a value users reach for that the operator does not accept."""
    meant = closest_choice(value, choices)
    typo = likely_typo(value, choices)
    if meant:
        note = "values are case-sensitive" if meant.casefold() == value.casefold() else "without the spaces"
        fix = f'use "{meant}" ({note})'
    elif typo:
        fix = f'did you mean "{typo}"? Use one of them, or leave it unset for the default'
    else:
        fix = "use one of them, or leave it unset for the default"
    reason = f"; {why}" if why else ""
    return Finding(rule, path, f"supported values: {quoted(choices)}{reason}; {fix}",
                   Problem.NOT_SUPPORTED, value)


def negative(rule: str, path: str, value: int) -> Finding | None:
    """A count or a duration in seconds below zero."""
    if value >= 0:
        return None
    return Finding(rule, path, f"must be greater than or equal to 0 (asked {value}); "
                               f"set {path} to 0 or more, or leave it unset", Problem.INVALID, value)


def check_choices(name: str, chosen: Sequence[str], supported: Sequence[str]) -> None:
    """For a Params field an admin may narrow but not widen (the operator knows no more)."""
    unknown = [c for c in chosen if c not in supported]
    if unknown or not chosen:
        raise ValueError(f"{name} must be one or more of {quoted(supported)}"
                         + (f" (not {quoted(unknown)})" if unknown else ""))
