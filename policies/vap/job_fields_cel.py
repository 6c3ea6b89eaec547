"""Reading an MPIJob in CEL the way ``policies.jobs`` reads it in Python: every field optional,
an absent map or list read as empty."""
from __future__ import annotations

from policies.vap import cel_text as cel

LAUNCHER = "Launcher"
WORKER = "Worker"
REPLICA_TYPES = (LAUNCHER, WORKER)


def replica_path(replica_type: str) -> str:
    return f"spec.mpiReplicaSpecs[{replica_type}]"


def has_spec_field(root: str, name: str) -> str:
    return cel.present(root, "spec", name)


def spec_field(root: str, name: str) -> str:
    return f"{root}.spec.{name}"


def has_specs(root: str) -> str:
    return cel.present(root, "spec", "mpiReplicaSpecs")


def specs(root: str) -> str:
    return f"{root}.spec.mpiReplicaSpecs"


def has_replica(root: str, replica_type: str) -> str:
    return f"{has_specs(root)} && {cel.string(replica_type)} in {specs(root)}"


def replica(root: str, replica_type: str) -> str:
    return f"{specs(root)}[{cel.string(replica_type)}]"


def launcher_as_worker(root: str) -> str:
    """``spec.runLauncherAsWorker`` is true (the launcher runs ranks too)."""
    return f"({has_spec_field(root, 'runLauncherAsWorker')} && {spec_field(root, 'runLauncherAsWorker')} == true)"


def has_pod(root: str, replica_type: str) -> str:
    r = replica(root, replica_type)
    return f"{has_replica(root, replica_type)} && has({r}.template) && has({r}.template.spec)"


def pod(root: str, replica_type: str) -> str:
    return f"{replica(root, replica_type)}.template.spec"


def pod_list(root: str, replica_type: str, key: str) -> str:
    """The pod template's ``containers`` or ``initContainers``, [] when absent."""
    p = pod(root, replica_type)
    return f"({has_pod(root, replica_type)} && has({p}.{key}) ? {p}.{key} : [])"


def run_policy_present(root: str, *fields: str) -> str:
    return cel.present(root, "spec", "runPolicy", *fields)
