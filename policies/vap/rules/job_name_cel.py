"""``job-name`` in CEL: the name is a DNS-1035 label, and the longest name the operator derives
from it (``<name>-worker-<replicas-1>`` or ``<name>-launcher``) has at most 63 characters.

The arithmetic is ``policies.rules.job_name``'s: 54 characters for 1–10 workers, 53 for
11–100, 52 for 101–1000, 54 with no Worker spec. With ``generateName`` and no name yet (an
offline check) the name is the prefix plus the five characters the API server adds, and the
message speaks of the prefix.
"""
from __future__ import annotations

from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, line, quoted_value, when
from policies.vap.job_fields_cel import WORKER, has_replica, launcher_as_worker, replica

RULE = "job-name"
DNS1035_LABEL_MAX = 63
DNS1035_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
LAUNCHER_SUFFIX = "-launcher"
WORKER_SUFFIX = "-worker-"
GENERATED_SUFFIX = "xxxxx"


def validations() -> list[Validation]:
    return [by_message("label", _label), by_message("length", _length)]


def _named(root: str) -> str:
    return f"(has({root}.metadata.name) && {root}.metadata.name != '')"


def _generated(root: str) -> str:
    return f"(!{_named(root)} && has({root}.metadata.generateName) && {root}.metadata.generateName != '')"


def _name(root: str) -> str:
    """The name the rule checks: the name, or the prefix plus five placeholder characters."""
    return (f"({_named(root)} ? {root}.metadata.name : "
            f"({_generated(root)} ? {root}.metadata.generateName + {cel.string(GENERATED_SUFFIX)} : ''))")


def _prefix(root: str) -> str:
    return f"({_generated(root)} ? {root}.metadata.generateName : {_name(root)})"


def _path(root: str) -> str:
    return f"({_generated(root)} ? 'metadata.generateName' : 'metadata.name')"


def _label(root: str) -> str:
    name = _name(root)
    problems = " + ".join([
        f"(!{name}.matches('^[a-z]') ? ['start with a lowercase letter'] : [])",
        f"({name}.matches('[^-a-z0-9]') ? ['use only lowercase letters, digits and \\'-\\''] : [])",
        f"({name}.endsWith('-') ? ['end with a letter or digit'] : [])",
    ])
    message = ("'the operator names the job\\'s Service and pods after it, so it must be a DNS-1035 label: ' + "
               f"({problems}).join('; ') + '; rename it'")
    return when(f"{name} != '' && !{name}.matches({cel.string(DNS1035_LABEL)})",
                line(RULE, _path(root), "Invalid value", message, quoted_value(_prefix(root))))


def _workers(root: str) -> str:
    """Worker pods the operator names (0 or unset still names worker-0); -1: no Worker spec and
    the launcher runs every rank, so only the launcher is named."""
    replicas = f"{replica(root, WORKER)}.replicas"
    return (f"(!({has_replica(root, WORKER)}) ? ({launcher_as_worker(root)} ? -1 : 1) : "
            f"(has({replicas}) && {replicas} > 0 ? {replicas} : 1))")


def _length(root: str) -> str:
    name, prefix, workers = _name(root), _prefix(root), _workers(root)
    # Suffix lengths: the launcher's, and the last worker's ("-worker-" and the highest index).
    launcher = len(LAUNCHER_SUFFIX)
    worker = f"({workers} < 0 ? 0 : {len(WORKER_SUFFIX)} + size(string({workers} - 1)))"
    suffix = f"({worker} >= {launcher} ? {worker} : {launcher})"
    derived = (f"({worker} >= {launcher} ? {name} + '{WORKER_SUFFIX}' + string({workers} - 1) : "
               f"{name} + '{LAUNCHER_SUFFIX}')")
    limit = f"({DNS1035_LABEL_MAX} - {suffix})"
    count = (f"({workers} < 0 ? 'no Worker spec' : string({workers}) + ({workers} == 1 ? ' worker' : ' workers'))")
    too_long = (f"'\"' + {derived} + '\" (' + string(size({derived})) + ' characters) is over the "
                f"{DNS1035_LABEL_MAX} allowed for a DNS-1035 label'")
    generated = ("'the API server appends 5 random characters and the operator names pods after the result: ' + "
                 f"{too_long} + '; with ' + {count} + ' the prefix may be at most ' + string({limit} - 5) + "
                 f"' characters: it is too long by ' + string(size({prefix}) - ({limit} - 5)) + ', shorten it'")
    named = (f"'the operator names pods after the job: ' + {too_long} + '; with ' + {count} + "
             f"' the name may be at most ' + string({limit}) + ' characters: shorten it by ' + "
             f"string(size({prefix}) - {limit})")
    message = f"({_generated(root)} ? {generated} : {named})"
    return when(f"{name} != '' && size({name}) + {suffix} > {DNS1035_LABEL_MAX}",
                line(RULE, _path(root), "Invalid value", message, quoted_value(prefix)))
