"""The effective job of a TrainJob, worked out once per runtime version and TrainJob spec, and
shared read-only by every request that asks for it.

Each request about a TrainJob on an MPI runtime needs its effective job (``effective_job``: the
runtime's JobSet template patched by the TrainJob, the counts, slots and resources), and the same
spec on the same runtime comes back again and again: /mutate then /validate of one CREATE, the
API server's retries, every UPDATE of it, and the quota rule counting a namespace's TrainJobs in
flight whenever one of them changes.

An entry is found by
- the runtime object itself, by identity: a cluster view hands out the very same object until
  the runtime changes and a new one after (``policies.cluster_view``), so an edited runtime (a
  new resourceVersion in the watch cache) is a new key. The entry holds on to the runtime, so
  its id cannot be taken by another object while the entry lives;
- the API shape;
- the TrainJob's ``SPEC_INPUTS`` (every spec field ``effective_job`` reads) written out by
  ``marshal`` (format 2), in their own key order (the controller takes the first GPU resource in
  map order): two TrainJobs share an entry only when all that their effective jobs are computed
  from is the same. ``marshal`` writes the type of every value (``1``, ``1.0``, ``True`` and
  ``"1"`` differ, floats exactly) and reads back what it wrote, so equal bytes are equal inputs;
  it costs about a third of the JSON text (which turned each string into escaped text). Format 2:
  later formats write a value seen twice as a back-reference, chosen by reference count, so the
  same spec could give other bytes depending on who else holds a reference to a part of it.
  Maps and lists that are not plain ``dict`` and ``list`` (which ``marshal`` refuses) are keyed
  by their JSON text instead (a ``str`` key never equals a ``bytes`` one).

The job handed out is frozen, its maps and lists read-only (``read_only``): a rule or mutation
that tried to write into it would fail at once instead of changing what the next request reads.
At most ``SIZE`` entries weighing (the key's length) at most ``bounded_memo.BUDGET`` together,
the least recently used dropped first; a spec heavier than its largest share is not remembered.
"""
from __future__ import annotations

import json
import marshal
from dataclasses import replace

from policies.trainer.api import ApiShape, Obj, spec
from policies.trainer.bounded_memo import BoundedMemo
from policies.trainer.effective_job import SPEC_INPUTS, EffectiveContainer, EffectiveJob, effective_job
from policies.trainer.read_only import ReadOnlyDict, read_only

SIZE = 512

_Key = tuple[int, ApiShape, bytes | str]


class EffectiveJobMemo:
    def __init__(self, size: int = SIZE) -> None:
        self._entries: BoundedMemo[_Key, tuple[Obj, EffectiveJob]] = BoundedMemo(size)

    def __call__(self, trainjob: Obj, runtime: Obj, shape: ApiShape, inputs: bytes | str | None = None) -> EffectiveJob:
        """``effective_job(trainjob, runtime, shape)``, frozen; computed only when no entry has it.
        ``inputs``: ``inputs_key(trainjob)``, when the caller has it already."""
        if inputs is None:
            inputs = inputs_key_or_none(trainjob)
        if inputs is None:  # not JSON (a YAML date, a cycle): not kept
            return frozen(effective_job(trainjob, runtime, shape))
        key = (id(runtime), shape, inputs)
        entry = self._entries.get(key)
        if entry is not None:
            return entry[1]
        job = frozen(effective_job(trainjob, runtime, shape))
        self._entries.put(key, (runtime, job), len(inputs))
        return job

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


_MARSHAL_FORMAT = 2  # no back-references: the bytes depend on the values only


def inputs_key(trainjob: Obj) -> bytes | str:
    """What the effective job is computed from in ``trainjob``, written out exactly: ``marshal``
    bytes, or JSON text for maps and lists of other types; raises when neither can write it."""
    job_spec = spec(trainjob)
    inputs = [job_spec.get(name) for name in SPEC_INPUTS]
    try:
        return marshal.dumps(inputs, _MARSHAL_FORMAT)
    except ValueError:  # a dict or list subclass, a date, too deep: JSON takes the first
        return json.dumps(inputs, separators=(",", ":"))


def inputs_key_or_none(trainjob: Obj) -> bytes | str | None:
    """``inputs_key(trainjob)``; None for what neither can write (a YAML date, a cycle)."""
    try:
        return inputs_key(trainjob)
    except (TypeError, ValueError, RecursionError):
        return None


def frozen(job: EffectiveJob) -> EffectiveJob:
    """``job`` with every map and list read-only; a container stays the very map its pod
    template lists."""
    made: dict[int, object] = {}

    def container(c: EffectiveContainer) -> EffectiveContainer:
        return replace(c, container=read_only(c.container, made))

    jobs = tuple(replace(rj, pod_template=read_only(rj.pod_template, made), pod_fields=ReadOnlyDict(rj.pod_fields),
                         containers=tuple(container(c) for c in rj.containers))
                 for rj in job.jobs)
    return replace(job, jobs=jobs)


memoised_effective_job = EffectiveJobMemo()
