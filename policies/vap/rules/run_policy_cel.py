"""``run-policy`` in CEL: ``cleanPodPolicy`` All, Running or None; the counts and durations not
negative; every ``minResources`` quantity valid and not negative; ``managedBy`` a controller
the admin allows, unchanged on UPDATE."""
from __future__ import annotations

from functools import partial

from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, line, param, quoted_choices, quoted_value, when

RULE = "run-policy"
BASE = "spec.runPolicy"
CLEAN_POD_POLICIES = ("All", "Running", "None")
COUNTS = ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit")
SCHEDULING_COUNTS = ("minAvailable", "scheduleTimeoutSeconds")
MPI_OPERATOR = "kubeflow.org/mpi-operator"
_FIX = "'; use one of them, or leave it unset for the default'"


def validations() -> list[Validation]:
    found = [by_message("cleanPodPolicy", _clean_pod_policy)]
    found += [by_message(name, partial(_count, fields=(name,))) for name in COUNTS]
    found += [by_message(name, partial(_count, fields=("schedulingPolicy", name))) for name in SCHEDULING_COUNTS]
    return [*found, _min_resources(), by_message("managedBy", _managed_by), _managed_by_unchanged()]


def _field(root: str, *fields: str) -> tuple[str, str]:
    """(whether spec.runPolicy.<fields> is set, its CEL)."""
    return cel.present(root, "spec", "runPolicy", *fields), ".".join((root, "spec", "runPolicy", *fields))


def _clean_pod_policy(root: str) -> str:
    is_set, value = _field(root, "cleanPodPolicy")
    choices = cel.strings(CLEAN_POD_POLICIES)
    message = f"'supported values: ' + {quoted_choices(choices)} + {_FIX}"
    return when(f"{is_set} && !({value} in {choices})",
                line(RULE, cel.string(f"{BASE}.cleanPodPolicy"), "Unsupported value", message, quoted_value(value)))


def _count(root: str, fields: tuple[str, ...]) -> str:
    is_set, value = _field(root, *fields)
    path = ".".join((BASE, *fields))
    asked = cel.as_string(value)
    message = f"'must be greater than or equal to 0 (asked ' + {asked} + '); set {path} to 0 or more, or leave it unset'"
    return when(f"{is_set} && {value} < 0", line(RULE, cel.string(path), "Invalid value", message, asked))


def _rendered(value: str) -> str:
    """An int-or-string value as the webhook shows it: strings quoted, numbers bare."""
    return f"(type({value}) == string ? {quoted_value(value)} : string({value}))"


def _min_resources() -> Validation:
    """A walk over the quantities (one quantity parse each); a quantity the stored object had
    with the same value is ratcheted."""
    fields = ("schedulingPolicy", "minResources")
    new_set, new = _field(cel.NEW, *fields)
    old_set, old = _field(cel.OLD, *fields)
    bad = f"!{cel.is_quantity(new + '[k]')} || {cel.sign(cel.quantity(new + '[k]'))} < 0"
    ratcheted = f"{cel.UPDATE} && {old_set} && k in {old} && string({old}[k]) == string({new}[k])"
    offending = f"({bad}) && !({ratcheted})"
    key, value = "variables.badMinResource", f"{new}[variables.badMinResource]"
    path = f"'{BASE}.schedulingPolicy.minResources[' + {key} + ']'"
    not_quantity = line(RULE, path, "Invalid value", "'not a quantity; write it like 2, \"500m\" or \"4Gi\"'",
                        _rendered(value))
    negative = line(RULE, path, "Invalid value",
                    f"'must be greater than or equal to 0 (asked ' + string({value}) + '); set ' + {path} + "
                    "' to 0 or more'", _rendered(value))
    message = f"!{cel.is_quantity(value)} ? {not_quantity} : {negative}"
    return Validation(
        "minResources", f"!({new_set}) || {new}.all(k, !({offending}))", message,
        (("badMinResources", f"{new_set} ? {new}.filter(k, {offending}) : []"),
         ("badMinResource", "size(variables.badMinResources) > 0 ? variables.badMinResources[0] : ''")))


def _managed_by(root: str) -> str:
    is_set, value = _field(root, "managedBy")
    choices = param("managedBy")
    message = f"'supported values: ' + {quoted_choices(choices)} + {_FIX}"
    return when(f"{is_set} && !({value} in {choices})",
                line(RULE, cel.string(f"{BASE}.managedBy"), "Unsupported value", message, quoted_value(value)))


def _managed_by_unchanged() -> Validation:
    """Immutable: unset means the MPI operator, so writing it out explicitly changes nothing.
    Never ratcheted (the stored object cannot have changed itself)."""
    new_set, new = _field(cel.NEW, "managedBy")
    old_set, old = _field(cel.OLD, "managedBy")
    operator = cel.string(MPI_OPERATOR)
    before = f"({old_set} && {old} != '' ? {old} : {operator})"
    after = f"({new_set} && {new} != '' ? {new} : {operator})"
    not_supported = f"({new_set} && !({new} in {param('managedBy')}))"
    path = f"{BASE}.managedBy"
    message = line(RULE, cel.string(path), "Invalid value",
                   f"'field is immutable: it was \"' + {before} + '\", and changing it would hand the job to another "
                   f"controller; set {path} back to \"' + {before} + '\", or delete and recreate the job'",
                   quoted_value(after))
    return Validation("managedByUnchanged", f"!({cel.UPDATE}) || {not_supported} || {before} == {after}", message)
