from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.interface import Mutated, RuleContext
from policies.mutations.edits import TEMPLATE_PATHS, WorkingCopy, pod_templates, set_default, set_value, templates_phrase
from policies.kube.names import is_dns1123_subdomain

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

    @staticmethod
    def _warnings(mounting: list[str]) -> tuple[str, ...]:
        if not mounting:
            return ()
        whose = "their" if len(mounting) > 1 else "its"
        return (f"{templates_phrase(mounting)} set {AUTOMOUNT}: true, so {whose} pods get a Kubernetes API "
                "token; MPI pods talk over SSH and need none: remove it unless the training code calls the API",)


def _names_service_account(pod: dict[str, Any]) -> bool:
    """``serviceAccount`` is the deprecated alias the API server still copies into
    ``serviceAccountName``: either one names the pod's ServiceAccount ("" names none)."""
    return bool(pod.get("serviceAccountName") or pod.get("serviceAccount"))
