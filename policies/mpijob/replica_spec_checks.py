"""Checks every replica spec must pass, whichever rule owns the replica type.

``launcher`` applies them to the Launcher, ``replica-spec`` to the Worker: one wording, and each
problem is reported once, by one rule.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.interface import Finding, Problem
from policies.mpijob.field_value_findings import not_supported
from policies.mpijob.reading import pod_spec, replica_path

# What the MPI operator accepts for ReplicaSpec.restartPolicy; unset means its default
# (OnFailure for the launcher, Never for workers).
RESTART_POLICIES = ("Never", "OnFailure")
_REFUSED_RESTART_POLICIES = {
    "Always": "the operator refuses Always: the launcher is a batch Job, and a restarted rank cannot "
              "rejoin the MPI job",
    "ExitCode": "the operator refuses ExitCode, a training-operator policy it does not implement",
}

# What the first container of each role runs: the operator adds its command and environment there.
ROLE_OF_FIRST_CONTAINER = {
    "Launcher": "the image that runs mpirun",
    "Worker": "the image that runs sshd and the MPI ranks",
}


def replica_problems(rule: str, replica_type: str, replica: Mapping[str, Any]) -> list[Finding]:
    """restartPolicy and containers of one present replica spec."""
    problems = []
    policy = replica.get("restartPolicy")
    if policy and policy not in RESTART_POLICIES:
        problems.append(not_supported(rule, f"{replica_path(replica_type)}.restartPolicy", policy, RESTART_POLICIES,
                                      why=_REFUSED_RESTART_POLICIES.get(policy, "")))
    if not pod_spec(replica).get("containers"):
        path = f"{replica_path(replica_type)}.template.spec.containers"
        role = ROLE_OF_FIRST_CONTAINER.get(replica_type, "its image")
        problems.append(Finding(rule, path, f"the {replica_type} pod template has no containers; "
                                            f"add at least one under {path}, with {role}", Problem.REQUIRED))
    return problems
