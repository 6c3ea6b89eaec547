from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from policies.interface import Mutated, RuleContext
from policies.mpijob.reading import QUEUE_LABEL
from policies.mutations.edits import WorkingCopy, lookup, set_default
from policies.kube.names import LABEL_VALUE_MAX, is_dns1123_subdomain, is_label_value


@dataclass(frozen=True)
class KueueQueueLabelParams:
    # LocalQueue per namespace, e.g. {"team-a": "team-a-queue"}; wins over default_queue.
    queues: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # LocalQueue for the namespaces not in ``queues``; None: their jobs get no label.
    default_queue: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.queues, Mapping):
            raise ValueError(f"queues must map each namespace to a LocalQueue name, not a {type(self.queues).__name__}")
        for namespace, queue in self.queues.items():
            _check_queue_name(queue, f"queue {queue!r} for namespace {namespace}")
        if self.default_queue is not None:
            _check_queue_name(self.default_queue, f"default queue {self.default_queue!r}")
        object.__setattr__(self, "queues", MappingProxyType(dict(self.queues)))

    def queue_for(self, namespace: str) -> str | None:
        return self.queues.get(namespace, self.default_queue)


def _check_queue_name(queue: Any, what: str) -> None:
    """Kueue's own webhook refuses a queue label that is not a DNS-1123 subdomain; a label
    value is at most 63 characters. Refused when the policy loads, not on every job."""
    if not (isinstance(queue, str) and is_dns1123_subdomain(queue) and is_label_value(queue)):
        raise ValueError(
            f"{what} is not a LocalQueue name: use lowercase letters, digits, '-' and '.', "
            f"at most {LABEL_VALUE_MAX} characters, starting and ending with a letter or digit"
        )


class KueueQueueLabel:
    """MPIJobs without a queue label get the LocalQueue the admin configured for their
    namespace, so they are queued and share quota fairly instead of bypassing Kueue."""

    id = "kueue-queue-label"
    Params = KueueQueueLabelParams
    enabled_by_default = True
    fields = (("metadata", "labels", QUEUE_LABEL),)

    def apply(self, job: WorkingCopy, ctx: RuleContext) -> Mutated:
        params: KueueQueueLabelParams = ctx.params(self.id)
        queue = params.queue_for(ctx.namespace)
        # Any value the user or Kueue set, even "", is theirs: never replaced.
        if queue is None or lookup(job, ("metadata", "labels", QUEUE_LABEL)) is not None:
            return Mutated()
        if _queue_missing(ctx, queue):
            # Kueue would keep a job naming a missing LocalQueue suspended, and the kueue-queue
            # rule would flag the label we added: a mutation must never create a violation.
            return Mutated(warnings=(
                f'namespace {ctx.namespace} has no LocalQueue "{queue}", so the job was not given the '
                f"{QUEUE_LABEL} label and Kueue does not queue it; ask the cluster administrator to create it",
            ))
        return Mutated(set_default(job, ("metadata", "labels"), QUEUE_LABEL, queue))


def _queue_missing(ctx: RuleContext, queue: str) -> bool:
    """Said only when the watch cache knows this namespace's LocalQueues (Kueue is installed)."""
    known = ctx.cluster.local_queues(ctx.namespace) if ctx.cluster.available else None
    if known is None:
        return False
    return all((q.get("metadata") or {}).get("name") != queue for q in known)
