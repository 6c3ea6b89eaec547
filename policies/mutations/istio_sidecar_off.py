from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.interface import Mutated, RuleContext
from policies.mutations.edits import TEMPLATE_PATHS, WorkingCopy, lookup, pod_templates, set_value, templates_phrase

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
