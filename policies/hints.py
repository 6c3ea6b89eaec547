"""A "did you mean …?" for names people mistype: rule ids, parameters, manifest fields."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``word`` was most likely meant to be, if any is close enough.

    Case and the ``-``/``_`` spelling are ignored first (``workerCount`` for ``worker-count``,
    ``max_gpus`` for ``maxGpus``); then ordinary edit similarity decides; last, a known name
    the word starts with (``maxSlots`` for ``max``)."""
    options = list(candidates)
    folded = {_fold(c): c for c in options}
    if _fold(word) in folded:
        return folded[_fold(word)]
    match = difflib.get_close_matches(word.lower(), [c.lower() for c in options], n=1, cutoff=0.6)
    if match:
        return next(c for c in options if c.lower() == match[0])
    # A name that starts with a known one (maxSlots, max_gpus for max): the longest such.
    prefixes = [c for c in options if len(_fold(c)) >= 3 and _fold(word).startswith(_fold(c))]
    return max(prefixes, key=len) if prefixes else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean X?"`` or ``""``, to end a message with."""
    match = closest(word, candidates)
    return f"; did you mean {match}?" if match and match != word else ""


def _fold(word: str) -> str:
    return word.replace("-", "").replace("_", "").lower()
