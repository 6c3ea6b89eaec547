"""``replica-spec`` in CEL: only Launcher and Worker replica specs, and the Worker's pod
template has a container and a restartPolicy the operator accepts.

Unknown replica types are a walk over the keys of ``spec.mpiReplicaSpecs``: one map lookup per
key, in the old object on UPDATE (a key the stored object already had is ratcheted, as the
webhook ratchets that finding).
"""
from __future__ import annotations

from policies.vap import cel_text as cel
from policies.vap.checks import Validation, line, quoted_value
from policies.vap.job_fields_cel import REPLICA_TYPES, WORKER, has_specs, specs
from policies.vap.rules.replica_checks_cel import replica_validations

RULE = "replica-spec"


def validations() -> list[Validation]:
    return [_unknown_types(), *replica_validations(RULE, WORKER)]


def _unknown_types() -> Validation:
    known = cel.strings(REPLICA_TYPES)
    new, old = specs(cel.NEW), specs(cel.OLD)
    ratcheted = f"({cel.UPDATE} && {has_specs(cel.OLD)} && k in {old})"
    unknown = f"!(k in {known}) && !{ratcheted}"
    expression = f"!({has_specs(cel.NEW)}) || {new}.all(k, !({unknown}))"
    key = f"variables.unknownReplicaType"
    renames = [(cel.string(t.lower()), cel.string('rename it to "' + t + '"')) for t in REPLICA_TYPES]
    fix = " : ".join([f"{key}.lowerAscii().trim() == {lowered} ? {rename}" for lowered, rename in renames]
                     + [cel.string("move its pod template to Launcher or Worker, or remove it")])
    message = line(RULE, f"'spec.mpiReplicaSpecs[' + {key} + ']'", "Unsupported value",
                   f"'an MPIJob has only the replica types \"Launcher\", \"Worker\"; the operator never creates pods "
                   f"for any other, so ' + ({fix})", quoted_value(key))
    first_unknown = f"{has_specs(cel.NEW)} ? {new}.filter(k, {unknown}) : []"
    return Validation(
        "unknownReplicaTypes", expression, message,
        (("unknownReplicaTypes", first_unknown),
         ("unknownReplicaType", "size(variables.unknownReplicaTypes) > 0 ? variables.unknownReplicaTypes[0] : ''")))
