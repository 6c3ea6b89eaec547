"""``job-name``: the operator can name every object it derives from the job's name.

From ``metadata.name`` = N the operator creates the Service ``N``, the launcher ``N-launcher``
and the worker pods ``N-worker-0`` … ``N-worker-<replicas-1>``, whose names are also their
hostnames: each must be a DNS-1035 label (at most 63 characters, lowercase letters, digits and
``-``, starting with a letter, ending with a letter or digit). Kubernetes itself accepts much
longer MPIJob names, so without this check the job is stored and then never starts.

Owns: the name's characters and the length of the longest derived name. With ``generateName``
(no name yet in the mutating call) the context's name is the prefix plus five placeholder
characters, and the message speaks of the prefix. A request with neither a name nor a
``generateName`` is left to the API server, which refuses it.
"""
from __future__ import annotations

import re

from policies.interface import Action, Finding, NoParams, Problem, RuleContext
from policies.mpijob.workload_builder import MPIJobPodNames
from policies.workload import DNS1035_LABEL_MAX, request_workload
from policies.workload import max_name_length as names_max_length

_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_NOT_LABEL_CHARACTER = re.compile(r"[^-a-z0-9]")
GENERATED_SUFFIX_LENGTH = 5  # the API server appends five random characters to generateName


def longest_derived_name(name: str, workers: int | None) -> str:
    """The longest name the MPI operator derives: the last worker's, or the launcher's."""
    return MPIJobPodNames(workers).longest(name)


def max_name_length(workers: int | None) -> int:
    """For an MPIJob: 54 for 1–10 workers, 53 for 11–100, 52 for 101–1000 (and 54 with no Worker spec)."""
    return names_max_length(MPIJobPodNames(workers))


def label_problems(name: str) -> list[str]:
    """What keeps ``name`` (length aside) from being a DNS-1035 label, in words."""
    problems = []
    if not name[:1].isascii() or not name[:1].isalpha() or not name[:1].islower():
        problems.append(f'start with a lowercase letter (it starts with "{name[:1]}")')
    bad = sorted(set(_NOT_LABEL_CHARACTER.findall(name)))
    if bad:
        problems.append(f"use only lowercase letters, digits and '-' (it has {', '.join(repr(c) for c in bad)})")
    if name.endswith("-"):
        problems.append("end with a letter or digit")
    return problems


def label_suggestion(name: str) -> str | None:
    """A close name that is a label: lowercased, other characters turned into '-'."""
    candidate = _NOT_LABEL_CHARACTER.sub("-", name.lower())
    candidate = re.sub(r"-{2,}", "-", candidate).lstrip("-0123456789").rstrip("-")
    return candidate if candidate and _DNS1035_LABEL.fullmatch(candidate) else None


class JobName:
    id = "job-name"
    Params = NoParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        if not ctx.name:
            return []
        generated = ctx.generated_name and len(ctx.name) > GENERATED_SUFFIX_LENGTH
        prefix = ctx.name[:-GENERATED_SUFFIX_LENGTH] if generated else ctx.name
        path = "metadata.generateName" if generated else "metadata.name"
        findings = []
        # A label has no problems to name: the one regular expression spares the three checks.
        if not _DNS1035_LABEL.fullmatch(ctx.name):
            problems = label_problems(ctx.name)
            if problems:
                findings.append(self._not_a_label(path, prefix, problems, generated))
        too_long = self._too_long(ctx, path, prefix, generated)
        if too_long is not None:
            findings.append(too_long)
        return findings

    def _not_a_label(self, path: str, written: str, problems: list[str], generated: bool) -> Finding:
        suggestion = label_suggestion(written + ("x" if generated else ""))
        if generated and suggestion:
            suggestion = suggestion[:-1]
        example = f', e.g. "{suggestion}"' if suggestion else ""
        return Finding(
            self.id, path,
            "the operator names the job's Service and pods after it, so it must be a DNS-1035 label: "
            f"{'; '.join(problems)}; rename it{example}",
            Problem.INVALID, written,
        )

    def _too_long(self, ctx: RuleContext, path: str, prefix: str, generated: bool) -> Finding | None:
        workload = request_workload(ctx)
        names = workload.pod_names
        derived = names.longest(ctx.name)
        if len(derived) <= DNS1035_LABEL_MAX:
            return None
        limit = names_max_length(names)
        controller = workload.kind.controller
        too_long = f'"{derived}" ({len(derived)} characters) is over the {DNS1035_LABEL_MAX} allowed for a DNS-1035 label'
        if generated:
            prefix_limit = limit - GENERATED_SUFFIX_LENGTH
            message = (f"the API server appends 5 random characters and {controller} names pods after the "
                       f"result: {too_long}; with {names.counted} the prefix may be at most {prefix_limit} "
                       f"characters: it is too long by {len(prefix) - prefix_limit}, shorten it")
        else:
            message = (f"{controller} names pods after the job: {too_long}; with {names.counted} the name may be "
                       f"at most {limit} characters: shorten it by {len(prefix) - limit}")
        return Finding(self.id, path, message, Problem.INVALID, prefix)
