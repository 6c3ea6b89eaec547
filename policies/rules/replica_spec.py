"""``replica-spec``: the set of replica specs, and the Worker's pod template and restartPolicy.

Owns: ``spec.mpiReplicaSpecs`` holds only ``Launcher`` and ``Worker`` (the operator silently
ignores any other key, so a ``Master`` or a misspelt ``worker`` would never run); the Worker
pod template has at least one container; the Worker ``restartPolicy`` is unset, ``Never`` or
``OnFailure``. Whether the Launcher and Worker specs exist and how many replicas they ask for
belongs to ``launcher`` and ``worker-count``; the Launcher's containers and restartPolicy to
``launcher``.
"""
from __future__ import annotations

from policies.interface import Action, Finding, NoParams, Problem, RuleContext
from policies.mpijob.field_value_findings import closest_choice, likely_typo, quoted
from policies.mpijob.reading import REPLICA_TYPES, WORKER, replica_path, replica_specs
from policies.mpijob.replica_spec_checks import replica_problems


class ReplicaSpec:
    id = "replica-spec"
    Params = NoParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        specs = replica_specs(ctx.job)
        findings = [self._unknown(key) for key in specs if key not in REPLICA_TYPES]
        worker = specs.get(WORKER)
        if worker is not None:
            findings += replica_problems(self.id, WORKER, worker)
        return findings

    def _unknown(self, key: str) -> Finding:
        guess = closest_choice(key, REPLICA_TYPES) or likely_typo(key, REPLICA_TYPES)
        fix = f'rename it to "{guess}"' if guess else "move its pod template to Launcher or Worker, or remove it"
        return Finding(
            self.id, replica_path(key),
            f"an MPIJob has only the replica types {quoted(REPLICA_TYPES)}; the operator never "
            f"creates pods for any other, so {fix}",
            Problem.NOT_SUPPORTED, key,
        )
