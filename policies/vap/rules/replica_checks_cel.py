"""``policies.replicas`` in CEL: a replica spec's restartPolicy and containers, shared by
``launcher`` (for the Launcher) and ``replica-spec`` (for the Worker)."""
from __future__ import annotations

from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, line, quoted_choices, quoted_value, when
from policies.vap.job_fields_cel import has_replica, pod_list, replica, replica_path

RESTART_POLICIES = ("Never", "OnFailure")
_WHY = {
    "Always": "the operator refuses Always: the launcher is a batch Job, and a restarted rank cannot "
              "rejoin the MPI job",
    "ExitCode": "the operator refuses ExitCode, a training-operator policy it does not implement",
}
ROLE_OF_FIRST_CONTAINER = {
    "Launcher": "the image that runs mpirun",
    "Worker": "the image that runs sshd and the MPI ranks",
}


def replica_validations(rule: str, replica_type: str) -> list[Validation]:
    return [by_message(f"restartPolicy{replica_type}", lambda root: _restart_policy(rule, replica_type, root)),
            by_message(f"containers{replica_type}", lambda root: _containers(rule, replica_type, root))]


def _restart_policy(rule: str, replica_type: str, root: str) -> str:
    r = replica(root, replica_type)
    value = f"{r}.restartPolicy"
    why = " + ".join(
        [f"({value} == {cel.string(policy)} ? {cel.string('; ' + reason)} : '')" for policy, reason in _WHY.items()])
    message = (f"'supported values: ' + {quoted_choices(cel.strings(RESTART_POLICIES))} + {why} + "
               "'; use one of them, or leave it unset for the default'")
    condition = (f"{has_replica(root, replica_type)} && has({value}) && {value} != '' && "
                 f"!({value} in {cel.strings(RESTART_POLICIES)})")
    path = cel.string(f"{replica_path(replica_type)}.restartPolicy")
    return when(condition, line(rule, path, "Unsupported value", message, quoted_value(value)))


def _containers(rule: str, replica_type: str, root: str) -> str:
    path = f"{replica_path(replica_type)}.template.spec.containers"
    message = cel.string(f"the {replica_type} pod template has no containers; add at least one under {path}, "
                         f"with {ROLE_OF_FIRST_CONTAINER[replica_type]}")
    condition = f"{has_replica(root, replica_type)} && size({pod_list(root, replica_type, 'containers')}) == 0"
    return when(condition, line(rule, cel.string(path), "Required value", message))
