"""``launcher`` in CEL: the Launcher spec exists, asks for 1 replica (or leaves it unset), and
its pod template has a container and a restartPolicy the operator accepts."""
from __future__ import annotations

from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, line, when
from policies.vap.job_fields_cel import LAUNCHER, has_replica, replica, replica_path
from policies.vap.rules.replica_checks_cel import replica_validations

RULE = "launcher"
PATH = replica_path(LAUNCHER)


def validations() -> list[Validation]:
    return [by_message("missing", _missing), by_message("replicas", _replicas),
            *replica_validations(RULE, LAUNCHER)]


def _missing(root: str) -> str:
    message = cel.string("an MPIJob needs a Launcher replica spec: the launcher pod runs mpirun; "
                         f"add {PATH} with replicas: 1 and a pod template")
    return when(f"!({has_replica(root, LAUNCHER)})", line(RULE, cel.string(PATH), "Required value", message))


def _replicas(root: str) -> str:
    replicas = f"{replica(root, LAUNCHER)}.replicas"
    asked = cel.as_string(replicas)
    message = (f"'an MPIJob has exactly 1 launcher (asked ' + {asked} + '); set {PATH}.replicas to 1 or leave it "
               "unset, and add workers for more ranks'")
    condition = f"{has_replica(root, LAUNCHER)} && has({replicas}) && {replicas} != 1"
    return when(condition, line(RULE, cel.string(f"{PATH}.replicas"), "Invalid value", message, asked))
