"""``job-name`` for TrainJobs in CEL: the name is a DNS-1035 label, and every pod name the JobSet
derives from it, ``<name>-<replicatedJob>-<jobIndex>-<podIndex>-<5 random>``, has at most 63
characters (44 for the usual MPI runtime: ``-launcher-0-0-xxxxx``).

The indexes come from each job of the runtime: JobSet replicas (1 for the trainer's ancestor)
and pods per Job (the ancestor's ``mlPolicy.numNodes``; the ``node`` job's
``spec.trainer.numNodes``, one fewer with ``runLauncherAsNode``; else ``parallelism``). A patch
that writes an ancestor label or names a job the runtime lacks leaves the length to the webhook.
"""
from __future__ import annotations

from policies.trainer.api import NODE
from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, line, quoted_value, when
from policies.vap.rules.job_name_cel import DNS1035_LABEL_MAX, GENERATED_SUFFIX, _generated, _label, _name, _path, _prefix
from policies.vap.trainjob_fields_cel import (
    JOBS,
    LAUNCHER_AS_NODE,
    Reading,
    at_least_one,
    count,
    job_named,
    replicas,
    trainer_field,
    trainer_present,
)

RULE = "job-name"
CONTROLLER = "the Trainer controller"


ROOTS = {cel.NEW: "New", cel.OLD: "Old"}


def validations(reading: Reading) -> list[Validation]:
    """The pod-name suffixes of the runtime's jobs are variables, each computed once per
    evaluation (for ``object`` and, on UPDATE, ``oldObject``)."""
    length = by_message("length", lambda root: _length(reading, root))
    declared = []
    for root, suffix in ROOTS.items():
        pods = f"{at_least_one(replicas('j'))} * {_pods_per_job(root, 'j')}"
        declared += [
            (f"podNameSuffixes{suffix}", f"{JOBS}.map(j, {_suffix(root, 'j')})"),
            (f"podNameSuffixSizes{suffix}", f"variables.podNameSuffixes{suffix}.map(s, size(s))"),
            (f"podCounts{suffix}", f"{JOBS}.map(j, string({pods}) + ' ' + (has(j.name) ? j.name : '') + ' pod' + "
                                   f"({pods} == 1 ? '' : 's')).join(' and ')"),
        ]
    return [by_message("label", _label),
            Validation(length.name, length.expression, length.message, (*declared, *length.variables))]


def _pods_per_job(root: str, j: str) -> str:
    num_nodes = trainer_field(root, "numNodes")
    from_job = (f"({LAUNCHER_AS_NODE} ? {at_least_one(f'{num_nodes} - 1')} : {at_least_one(num_nodes)})")
    return f"({job_named(j, NODE)} && {trainer_present(root, 'numNodes')} ? {from_job} : {count(j)})"


def _suffix(root: str, j: str) -> str:
    name = f"(has({j}.name) ? {j}.name : '')"
    return (f"'-' + {name} + '-' + string({at_least_one(replicas(j))} - 1) + '-' + "
            f"string({_pods_per_job(root, j)} - 1) + '-{GENERATED_SUFFIX}'")


def _length(reading: Reading, root: str) -> str:
    name, prefix, suffix = _name(root), _prefix(root), ROOTS[root]
    suffixes, sizes = f"variables.podNameSuffixes{suffix}", f"variables.podNameSuffixSizes{suffix}"
    longest_suffix = f"(size({JOBS}) > 0 ? {sizes}.max() : {len(GENERATED_SUFFIX) + 1})"
    derived = f"(size({JOBS}) > 0 ? {name} + {suffixes}[{sizes}.indexOf({sizes}.max())] : {name} + '-{GENERATED_SUFFIX}')"
    limit = f"({DNS1035_LABEL_MAX} - {longest_suffix})"
    counted = f"(size({JOBS}) == 0 ? 'no replicated job' : variables.podCounts{suffix})"
    too_long = (f"'\"' + {derived} + '\" (' + string(size({derived})) + ' characters) is over the "
                f"{DNS1035_LABEL_MAX} allowed for a DNS-1035 label'")
    generated = (f"'the API server appends 5 random characters and {CONTROLLER} names pods after the result: ' + "
                 f"{too_long} + '; with ' + {counted} + ' the prefix may be at most ' + string({limit} - 5) + "
                 f"' characters: it is too long by ' + string(size({prefix}) - ({limit} - 5)) + ', shorten it'")
    named = (f"'{CONTROLLER} names pods after the job: ' + {too_long} + '; with ' + {counted} + "
             f"' the name may be at most ' + string({limit}) + ' characters: shorten it by ' + "
             f"string(size({prefix}) - {limit})")
    message = f"({_generated(root)} ? {generated} : {named})"
    unknown = cel.any_of([reading.writes_any_ancestor_label(root), reading.adds_unknown_job(root)])
    return when(f"{name} != '' && size({name}) + {longest_suffix} > {DNS1035_LABEL_MAX} && !({unknown})",
                line(RULE, _path(root), "Invalid value", message, quoted_value(prefix)))
