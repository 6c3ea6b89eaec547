from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.interface import Mutated, RuleContext
from policies.mutations.edits import TEMPLATE_PATHS, WorkingCopy, lookup, pod_templates, set_value, templates_phrase
from policies.trainer import own_patch
from policies.trainer.trainjob_review import TrainJobReview, review_of

INJECT = "sidecar.istio.io/inject"
# The label is Istio's current switch; OpenShift Service Mesh 2 still reads the annotation.
INJECT_FIELDS = ("labels", "annotations")
# What Istio's injector reads as "inject" (case-insensitive); any other value means no sidecar.
ASKS_FOR_SIDECAR = frozenset({"true", "yes", "y", "on"})
WHY = "the launcher Job never completes (its sidecar keeps running) and SSH between ranks fails under strict mTLS"


@dataclass(frozen=True)
class IstioSidecarOffParams:
    # Keep a template's explicit request for a sidecar instead of overriding it (warned either way).
    keep_explicit_true: bool = False


class IstioSidecarOff:
    """Launcher and Worker pods run without an Istio sidecar: label and annotation
    ``sidecar.istio.io/inject: "false"`` on both pod templates."""

    id = "istio-sidecar-off"
    Params = IstioSidecarOffParams
    enabled_by_default = True
    fields = tuple((*path, "metadata", field, INJECT) for _, path in TEMPLATE_PATHS for field in INJECT_FIELDS)

    def apply(self, job: WorkingCopy, ctx: RuleContext) -> Mutated:
        params: IstioSidecarOffParams = ctx.params(self.id)
        review = review_of(ctx) if ctx.trainjob is not None else None  # an MPIJob's context carries none
        if review is not None:
            return self._apply_to_trainjob(job, review, params)
        changed = False
        asked: list[str] = []
        for replica_type, path, template in pod_templates(job):
            if asks_for_sidecar(lookup(template, ("metadata",))):
                asked.append(replica_type)
                if params.keep_explicit_true:
                    continue
            for field in INJECT_FIELDS:
                changed |= set_value(job, (*path, "metadata", field), INJECT, "false")
        return Mutated(changed, self._warnings(asked, params))

    def _apply_to_trainjob(self, job: WorkingCopy, review: TrainJobReview,
                           params: IstioSidecarOffParams) -> Mutated:
        """A TrainJob's launcher and node pods get the label and annotation through our own
        patch entry, where their pod templates (runtime and patches together) lack them."""
        effective = review.effective
        if effective is None:
            return Mutated()
        targets = [rj for rj in (effective.launcher, effective.node) if rj is not None]
        asked = [rj.name for rj in targets if asks_for_sidecar(rj.pod_template.get("metadata"))]
        changed = full = False
        # Written for every pod it may touch, not only those that lack it: "false" again changes
        # nothing, and the pods then share one patch entry (on v2.1, one override per target set)
        eligible = [rj for rj in targets if not (params.keep_explicit_true and rj.name in asked)]
        for field in INJECT_FIELDS:
            if any(lookup(rj.pod_template.get("metadata"), (field, INJECT)) != "false" for rj in eligible):
                names = [rj.name for rj in eligible]
                done = own_patch.set_on_pods(job, review.shape, names, "metadata", field, "false", INJECT)
                changed, full = changed or done, full or not done
        warnings = self._warnings(asked, params)
        if full:
            warnings += (f"{own_patch.FULL}: the pods may get an Istio sidecar, and then {WHY}; "
                         f'set {INJECT}: "false" in one of the entries',)
        return Mutated(changed, warnings)

    @staticmethod
    def _warnings(asked: list[str], params: IstioSidecarOffParams) -> tuple[str, ...]:
        if not asked:
            return ()
        where = templates_phrase(asked)
        if params.keep_explicit_true:
            return (f'{INJECT} "true" kept on {where} as the policy allows, but {WHY}; set "false" to fix',)
        return (f'{INJECT} "true" on {where} was changed to "false": with a sidecar {WHY}',)


def asks_for_sidecar(metadata: Any) -> bool:
    """True when the label or the annotation asks Istio for a sidecar."""
    if not isinstance(metadata, Mapping):
        return False
    for field in INJECT_FIELDS:
        value = lookup(metadata, (field, INJECT))
        if isinstance(value, str) and value.lower() in ASKS_FOR_SIDECAR:
            return True
    return False
