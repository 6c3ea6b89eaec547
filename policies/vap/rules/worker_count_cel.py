"""``worker-count`` in CEL: a Worker spec unless the launcher runs every rank, and a replica
count set and within [min, max] (parameters that may differ per namespace)."""
from __future__ import annotations

from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, first, line, param
from policies.vap.job_fields_cel import WORKER, has_replica, launcher_as_worker, replica, replica_path

RULE = "worker-count"
PATH = replica_path(WORKER)
MIN, MAX = param("min"), param("max")


def validations() -> list[Validation]:
    return [by_message("workers", _workers)]


def _allowed() -> str:
    return f"'between ' + string({MIN}) + ' and ' + string({MAX})"


def _workers(root: str) -> str:
    replicas = f"{replica(root, WORKER)}.replicas"
    asked = cel.as_string(replicas)
    path, count_path = cel.string(PATH), cel.string(f"{PATH}.replicas")
    missing = line(RULE, path, "Required value",
                   "'an MPIJob needs a Worker replica spec unless spec.runLauncherAsWorker is true; "
                   f"add {PATH} with replicas ' + {_allowed()} + ' and a pod template'")
    unset = line(RULE, count_path, "Required value",
                 "'not set, and the MPI operator then starts 0 workers (an omitted Worker count is 0, not 1); "
                 f"set {PATH}.replicas to a number ' + {_allowed()}")
    too_many = line(RULE, count_path, "Invalid value",
                    f"'at most ' + string({MAX}) + ' workers are allowed (asked ' + {asked} + '); set {PATH}.replicas "
                    f"to ' + string({MAX}) + ' or fewer, and give each worker more slots or GPUs if you need the ranks'",
                    asked)
    too_few = line(RULE, count_path, "Invalid value",
                   f"'at least ' + string({MIN}) + ' workers are required for a distributed job (asked ' + {asked} + "
                   f"'); set {PATH}.replicas to ' + string({MIN}) + ' or more'", asked)
    has_worker = has_replica(root, WORKER)
    # Each case proves the count set where it reads it (not through an earlier case being
    # false): the API server's evaluation fails on an absent field, whatever the order.
    has_count = f"{has_worker} && has({replicas})"
    return first(
        (f"!({has_worker}) && !{launcher_as_worker(root)}", missing),
        (f"{has_worker} && !has({replicas})", unset),
        (f"{has_count} && {replicas} > {MAX}", too_many),
        (f"{has_count} && {replicas} < {MIN}", too_few),
    )
