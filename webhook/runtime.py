"""What one server process holds: the admission logic wired to its policy and cluster view, and
the readiness checks that gate traffic until both are loaded."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from policies.cluster_view import NO_CLUSTER, ClusterView
from policies.config.layered_policy import Policy
from webhook.admission import Admission
from webhook.client_auth import ClientAuthentication
from webhook.body_budget import BodyBudget
from webhook.conversion_review import ConversionWebhook

# A readiness check answers (ready, detail); detail is shown on /readyz.
ReadinessCheck = Callable[[], tuple[bool, str]]


@dataclass
class Runtime:
    admission: Admission
    conversion: ConversionWebhook = field(default_factory=ConversionWebhook)
    readiness_checks: dict[str, ReadinessCheck] = field(default_factory=dict)
    # serve --client-ca-file: who may call the admission and conversion endpoints (None: anyone).
    client_auth: ClientAuthentication | None = None
    # The memory request bodies may take at once in this process (webhook.body_budget).
    body_budget: BodyBudget = field(default_factory=BodyBudget)

    def readiness(self) -> tuple[bool, dict[str, dict[str, object]]]:
        results = {}
        for name, check in self.readiness_checks.items():
            try:
                ok, detail = check()
            except Exception as exc:  # noqa: BLE001 - a broken check means not ready, not a crash
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            results[name] = {"ready": ok, "detail": detail}
        return all(r["ready"] for r in results.values()), results


def default_runtime(policy: Policy | None = None, cluster: ClusterView = NO_CLUSTER) -> Runtime:
    """The embedded default: built-in policy, no cluster (cluster rules skipped with a warning)."""
    fixed = policy or Policy()
    return Runtime(Admission(policy=lambda: fixed, cluster=cluster))
