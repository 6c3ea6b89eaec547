"""Which exported checks a job fails, not only which rules: the exported policies with every
message replaced by the name of its check, evaluated as the API server evaluates them.

Each validation's static ``message`` names its check ("[rule] the MPIJob fails the <check>
check of <rule>"); written as the ``messageExpression``, it comes back as the answer's message.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from policies.vap import cel_text as cel

POLICY_KIND = "ValidatingAdmissionPolicy"


def checks(objects: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every check of the exported policies, by its static message."""
    return {v["message"] for o in objects if o["kind"] == POLICY_KIND for v in o["spec"]["validations"]}


def naming_checks(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The same policies, each failing validation answering with the name of its check (the
    verdicts are unchanged: only the messages differ, and they cost less to build)."""
    found = copy.deepcopy(list(objects))
    for policy in found:
        if policy["kind"] == POLICY_KIND:
            for validation in policy["spec"]["validations"]:
                validation["messageExpression"] = cel.string(validation["message"])
    return found
