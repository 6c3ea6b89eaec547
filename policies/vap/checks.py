"""One exported check: CEL that passes or names what is wrong, and how an UPDATE is ratcheted.

The webhook does not block an UPDATE for a problem the stored object already had word for word
(``policies.engine._ratchet``): tightening the policy must not freeze older jobs. A check
written ``by_message`` computes its message for the new object and, on UPDATE, for the old one;
it fails only when the message is new. Each message names one finding's path and what makes it
wrong, so equal messages mean the same finding, as in the webhook.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from policies.vap import cel_text as cel

Message = Callable[[str], str]  # root ("object" / "oldObject") → CEL string, "" when it passes


@dataclass(frozen=True)
class Validation:
    name: str  # a CEL identifier, unique within the rule: names the policy's variables
    expression: str  # CEL bool: true when the request passes this check
    message: str  # CEL string, read only when the check fails
    variables: tuple[tuple[str, str], ...] = ()  # (name, CEL) the expressions read


def param(name: str) -> str:
    """The CEL of a rule parameter's value in the request's namespace."""
    return f"variables.param_{name}"


def by_message(name: str, message: Message) -> Validation:
    """A check whose message alone says whether it fails (""), ratcheted by message."""
    new, old = name, f"{name}Old"
    return Validation(
        name,
        f"variables.{new} == '' || variables.{new} == variables.{old}",
        f"variables.{new}",
        ((new, message(cel.NEW)), (old, f"{cel.UPDATE} ? {message(cel.OLD)} : ''")),
    )


def when(condition: str, message: str) -> str:
    """``message`` when ``condition`` holds, else ''."""
    return f"({condition} ? {message} : '')"


def first(*cases: tuple[str, str]) -> str:
    """The message of the first case whose condition holds, else ''."""
    expression = "''"
    for condition, message in reversed(cases):
        expression = f"({condition} ? {message} : {expression})"
    return expression


def line(rule: str, path: str, label: str, message: str, value: str | None = None) -> str:
    """CEL for ``[rule] path: Label: value: message`` (``policies.messages.line``); ``path``,
    ``value`` and ``message`` are CEL string expressions, ``rule`` and ``label`` plain text."""
    head = cel.string(f"[{rule}] ")
    parts = [head, path, cel.string(f": {label}: ")]
    if value is not None:
        parts += [value, cel.string(": ")]
    parts.append(message)
    return " + ".join(parts)


def quoted_value(expr: str) -> str:
    """A string value as the webhook shows it: in double quotes."""
    return f"'\"' + {expr} + '\"'"


def quoted_choices(choices: str) -> str:
    """CEL: ``"A", "B"`` from a CEL list of strings (strings library ``join``)."""
    return f"'\"' + {choices}.join('\", \"') + '\"'"
