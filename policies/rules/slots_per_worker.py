from __future__ import annotations

from dataclasses import dataclass

from policies.interface import Action, Finding, RuleContext
from policies.mpijob.reading import spec


@dataclass(frozen=True)
class SlotsPerWorkerParams:
    # Fewest MPI ranks (hostfile slots) per worker pod that spec.slotsPerWorker may set.
    min: int = 1
    # Most MPI ranks (hostfile slots) per worker pod that spec.slotsPerWorker may set.
    max: int = 8


class SlotsPerWorker:
    """spec.slotsPerWorker: MPI ranks per worker pod, within the admin's range."""

    id = "slots-per-worker"
    Params = SlotsPerWorkerParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        params: SlotsPerWorkerParams = ctx.params(self.id)
        slots = spec(ctx.job).get("slotsPerWorker")
        if slots is None or params.min <= slots <= params.max:
            return []
        fix = params.max if slots > params.max else params.min
        return [Finding(
            self.id,
            "spec.slotsPerWorker",
            f"slotsPerWorker must be between {params.min} and {params.max} (asked {slots}); "
            f"set spec.slotsPerWorker to {fix}, and use more workers for more ranks",
            value=slots,
        )]
