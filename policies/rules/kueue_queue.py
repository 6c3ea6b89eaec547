"""``kueue-queue``: the Kueue LocalQueue the job names exists in its namespace.

Kueue suspends a job that names a queue and admits it only through that queue; a job naming a
LocalQueue that does not exist stays suspended with no visible reason. Nothing is said when the
job names no queue or when Kueue is not installed (no LocalQueue CRD).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.interface import Action, Finding, NoParams, Problem, RuleContext
from policies.cluster_view import Obj, SnapshotMemo
from policies.messages import fits_warning
from policies.workload import request_workload


def _queue_names(queues: Sequence[Obj]) -> tuple[str, ...]:
    return tuple(sorted({(q.get("metadata") or {}).get("name") or "" for q in queues} - {""}))


# Keyed on the ClusterView's snapshot of the namespace's LocalQueues: read again only when one changed.
queue_names: SnapshotMemo[tuple[str, ...]] = SnapshotMemo(_queue_names, size=2048)


class KueueQueue:
    id = "kueue-queue"
    Params = NoParams
    default_action = Action.WARN
    needs_cluster = True

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        workload = request_workload(ctx)
        wanted = workload.queue
        if wanted is None:
            return
        queues = ctx.cluster.local_queues(ctx.namespace)
        if queues is None:
            return
        names = queue_names(queues)
        if wanted in names:
            return
        path = workload.queue_source.finding_path
        if not names:
            message = self._message(ctx, wanted, "it has no LocalQueue at all", "ask your cluster administrator for one")
        for shown in range(min(len(names), 5), 0, -1):  # as many queue names as a warning holds
            listed = ", ".join(names[:shown]) + (", …" if len(names) > shown else "")
            message = self._message(ctx, wanted, f"LocalQueues here: {listed}", "set the label to one of them")
            if fits_warning(self.id, path, message):
                break
        yield Finding(self.id, path, message, Problem.POLICY)

    @staticmethod
    def _message(ctx: RuleContext, wanted: str, known: str, fix: str) -> str:
        return (f'LocalQueue "{wanted}" does not exist in namespace {ctx.namespace} ({known}); Kueue would keep '
                f"the job suspended with no visible reason; {fix}")
