"""``slots-per-worker`` in CEL: ``spec.slotsPerWorker``, when set, within [min, max]."""
from __future__ import annotations

from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, line, param, when
from policies.vap.job_fields_cel import has_spec_field, spec_field

RULE = "slots-per-worker"
MIN, MAX = param("min"), param("max")


def validations() -> list[Validation]:
    return [by_message("slots", _slots)]


def _slots(root: str) -> str:
    slots = spec_field(root, "slotsPerWorker")
    asked = cel.as_string(slots)
    fix = f"string({slots} > {MAX} ? {MAX} : {MIN})"
    message = (f"'slotsPerWorker must be between ' + string({MIN}) + ' and ' + string({MAX}) + ' (asked ' + {asked} + "
               f"'); set spec.slotsPerWorker to ' + {fix} + ', and use more workers for more ranks'")
    condition = f"{has_spec_field(root, 'slotsPerWorker')} && ({slots} < {MIN} || {slots} > {MAX})"
    return when(condition, line(RULE, cel.string("spec.slotsPerWorker"), "Invalid value", message, asked))
