from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from policies.interface import Mutated, RuleContext
from policies.mutations.edits import TEMPLATE_PATHS, WorkingCopy, pod_templates, set_default, set_value, templates_phrase
from policies.kube.names import is_dns1123_subdomain
from policies.trainer import own_patch
from policies.trainer.trainjob_review import TrainJobReview, review_of

AUTOMOUNT = "automountServiceAccountToken"


@dataclass(frozen=True)
class RestrictedServiceAccountParams:
    # ServiceAccount for Launcher and Worker pods that name none; None keeps the namespace's
    # "default" ServiceAccount (still without a mounted token).
    service_account: str | None = None

    def __post_init__(self) -> None:
        name = self.service_account
        if name is not None and not (isinstance(name, str) and is_dns1123_subdomain(name)):
            raise ValueError(
                f"ServiceAccount name {name!r} is not valid: use lowercase letters, digits, '-' and '.', "
                "starting and ending with a letter or digit"
            )


class RestrictedServiceAccount:
    """MPI v2 pods reach each other over SSH and never call the Kubernetes API, so by default
    they get no ServiceAccount token, and optionally a ServiceAccount with no permissions."""

    id = "restricted-service-account"
    Params = RestrictedServiceAccountParams
    enabled_by_default = True
    fields = tuple((*path, "spec", field) for _, path in TEMPLATE_PATHS
                   for field in (AUTOMOUNT, "serviceAccountName", "serviceAccount"))

    def apply(self, job: WorkingCopy, ctx: RuleContext) -> Mutated:
        params: RestrictedServiceAccountParams = ctx.params(self.id)
        review = review_of(ctx) if ctx.trainjob is not None else None  # an MPIJob's context carries none
        if review is not None:
            return self._apply_to_trainjob(job, review, params)
        changed = False
        mounting: list[str] = []
        for replica_type, path, template in pod_templates(job):
            pod = template.get("spec")
            if not isinstance(pod, dict):
                continue  # no pod to run: the validating rules refuse the job
            if pod.get(AUTOMOUNT) is True:
                mounting.append(replica_type)
            changed |= set_default(job, (*path, "spec"), AUTOMOUNT, False)
            if params.service_account and not _names_service_account(pod):
                changed |= set_value(job, (*path, "spec"), "serviceAccountName", params.service_account)
        return Mutated(changed, self._warnings(mounting))

    def _apply_to_trainjob(self, job: WorkingCopy, review: TrainJobReview,
                           params: RestrictedServiceAccountParams) -> Mutated:
        """A TrainJob's patches cannot set automountServiceAccountToken (PodSpecPatch has no
        such field): the restricted ServiceAccount carries ``automountServiceAccountToken:
        false`` itself. What a patch can do is name it, for the launcher and node pods whose
        templates name no ServiceAccount."""
        effective = review.effective
        if effective is None:
            return Mutated()
        targets = [rj for rj in (effective.launcher, effective.node) if rj is not None]
        mounting = [rj.name for rj in targets if rj.pod_spec.get(AUTOMOUNT) is True]
        unnamed = [rj.name for rj in targets if not _names_service_account(rj.pod_spec)]
        changed = False
        warnings = self._warnings(mounting)
        if params.service_account and unnamed:
            changed = own_patch.set_on_pods(job, review.shape, unnamed, "spec", "serviceAccountName",
                                            params.service_account)
            if not changed:
                warnings += (f"{own_patch.FULL}: the {' and '.join(unnamed)} pods run as the namespace's "
                             f"default ServiceAccount, not {params.service_account}",)
        return Mutated(changed, warnings)

    @staticmethod
    def _warnings(mounting: list[str]) -> tuple[str, ...]:
        if not mounting:
            return ()
        whose = "their" if len(mounting) > 1 else "its"
        return (f"{templates_phrase(mounting)} set {AUTOMOUNT}: true, so {whose} pods get a Kubernetes API "
                "token; MPI pods talk over SSH and need none: remove it unless the training code calls the API",)


def _names_service_account(pod: Mapping[str, Any]) -> bool:
    """``serviceAccount`` is the deprecated alias the API server still copies into
    ``serviceAccountName``: either one names the pod's ServiceAccount ("" names none)."""
    return bool(pod.get("serviceAccountName") or pod.get("serviceAccount"))
