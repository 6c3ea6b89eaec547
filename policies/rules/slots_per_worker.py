from __future__ import annotations

from dataclasses import dataclass

from policies.interface import Action, Finding, RuleContext
from policies.workload import request_workload


@dataclass(frozen=True)
class SlotsPerWorkerParams:
    # Fewest MPI ranks (hostfile slots) per worker pod that spec.slotsPerWorker may set.
    min: int = 1
    # Most MPI ranks (hostfile slots) per worker pod that spec.slotsPerWorker may set.
    max: int = 8


class SlotsPerWorker:
    """MPI ranks per worker pod (an MPIJob's spec.slotsPerWorker), within the admin's range."""

    id = "slots-per-worker"
    Params = SlotsPerWorkerParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        params: SlotsPerWorkerParams = ctx.params(self.id)
        workload = request_workload(ctx)
        slots, source = workload.slots.value, workload.slots.source
        if slots is None or params.min <= slots <= params.max:
            return []
        fix = params.max if slots > params.max else params.min
        return [Finding(
            self.id,
            source.finding_path,
            source.said(f"{source.field_name} must be between {params.min} and {params.max} (asked {slots}); "
                        f"{source.set_to(str(fix))}, and use more {workload.workers.noun}s for more ranks"),
            value=slots,
        )]
