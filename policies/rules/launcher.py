"""``launcher``: everything about ``spec.mpiReplicaSpecs[Launcher]``.

Owns: the Launcher spec is present; its ``replicas`` is exactly 1 (omitted means 1, as the
operator defaults it); its pod template has at least one container; its ``restartPolicy`` is
unset, ``Never`` or ``OnFailure``. The same container and restartPolicy checks for the Worker
belong to ``replica-spec``, so each problem is reported once.
"""
from __future__ import annotations

from collections.abc import Iterator

from policies.base import Action, Finding, NoParams, Problem, RuleContext
from policies.jobs import LAUNCHER, replica_path, replica_spec
from policies.replicas import replica_problems


class Launcher:
    id = "launcher"
    Params = NoParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        launcher = replica_spec(ctx.job, LAUNCHER)
        path = replica_path(LAUNCHER)
        if launcher is None:
            yield Finding(self.id, path,
                          "an MPIJob needs a Launcher replica spec: the launcher pod runs mpirun; "
                          f"add {path} with replicas: 1 and a pod template", Problem.REQUIRED)
            return
        replicas = launcher.get("replicas")
        if replicas is not None and replicas != 1:
            yield Finding(self.id, f"{path}.replicas",
                          f"an MPIJob has exactly 1 launcher (asked {replicas}); "
                          f"set {path}.replicas to 1 or leave it unset, and add workers for more ranks",
                          Problem.INVALID, replicas)
        yield from replica_problems(self.id, LAUNCHER, launcher)
