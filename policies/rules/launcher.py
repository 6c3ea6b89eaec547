"""``launcher``: everything about ``spec.mpiReplicaSpecs[Launcher]``.

Owns: the Launcher spec is present; its ``replicas`` is exactly 1 (omitted means 1, as the
operator defaults it); its pod template has at least one container; its ``restartPolicy`` is
unset, ``Never`` or ``OnFailure``. The same container and restartPolicy checks for the Worker
belong to ``replica-spec``, so each problem is reported once.
"""
from __future__ import annotations

from policies.interface import Action, Finding, NoParams, Problem, RuleContext
from policies.mpijob.reading import LAUNCHER, replica_path, replica_spec
from policies.mpijob.replica_spec_checks import replica_problems

PATH = replica_path(LAUNCHER)


class Launcher:
    id = "launcher"
    Params = NoParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        launcher = replica_spec(ctx.job, LAUNCHER)
        if launcher is None:
            return [Finding(self.id, PATH,
                            "an MPIJob needs a Launcher replica spec: the launcher pod runs mpirun; "
                            f"add {PATH} with replicas: 1 and a pod template", Problem.REQUIRED)]
        findings = []
        replicas = launcher.get("replicas")
        if replicas is not None and replicas != 1:
            findings.append(Finding(self.id, f"{PATH}.replicas",
                                    f"an MPIJob has exactly 1 launcher (asked {replicas}); "
                                    f"set {PATH}.replicas to 1 or leave it unset, and add workers for more ranks",
                                    Problem.INVALID, replicas))
        findings += replica_problems(self.id, LAUNCHER, launcher)
        return findings
