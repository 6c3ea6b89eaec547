"""Every rule and mutation the webhook knows, in the order they run and report."""
from __future__ import annotations

from collections.abc import Sequence

from policies.config.rule_settings import MutationConfig, RuleConfig, Settings
from policies.interface import Mutation, Rule
from policies.mutations.istio_sidecar_off import IstioSidecarOff
from policies.mutations.kueue_queue_label import KueueQueueLabel
from policies.mutations.restricted_service_account import RestrictedServiceAccount
from policies.rules.conversion_problem import ConversionProblem
from policies.rules.gpus_per_worker import GpusPerWorker
from policies.rules.image_reference import ImageReference
from policies.rules.job_name import JobName
from policies.rules.kueue_queue import KueueQueue
from policies.rules.limit_range import LimitRange
from policies.rules.launcher import Launcher
from policies.rules.mpi_settings import MpiSettings
from policies.rules.node_fit import NodeFit
from policies.rules.pod_security import PodSecurity
from policies.rules.replica_spec import ReplicaSpec
from policies.rules.resource_quota import ResourceQuota
from policies.rules.run_policy import RunPolicy
from policies.rules.slots_per_worker import SlotsPerWorker
from policies.rules.training_runtime import TrainingRuntime
from policies.rules.worker_count import WorkerCount

RULES: tuple[Rule, ...] = (
    # the spec as written, top to bottom: name, structure, counts, MPI wiring, lifecycle, pods
    JobName(),
    ConversionProblem(),
    ReplicaSpec(),
    Launcher(),
    WorkerCount(),
    SlotsPerWorker(),
    MpiSettings(),
    RunPolicy(),
    TrainingRuntime(),  # TrainJobs only
    ImageReference(),
    GpusPerWorker(),
    # cluster-aware: read the namespace's LimitRanges, quotas, nodes and queues from the caches
    LimitRange(),
    ResourceQuota(),
    NodeFit(),
    KueueQueue(),
    # the namespace's PodSecurity labels (namespace cache): the pods as PodSecurity admission will see them
    PodSecurity(),
)

# A TrainJob on an MPI runtime gets every rule about the workload, the launcher's count and
# its runtime; the MPIJob-only rules read fields a TrainJob does not have.
_MPIJOB_ONLY = ("conversion-problem", "replica-spec", "mpi-settings", "run-policy")
TRAINJOB_RULES: tuple[Rule, ...] = tuple(rule for rule in RULES if rule.id not in _MPIJOB_ONLY)
# An MPIJob gets every rule but those about a TrainJob's runtime, which find nothing in an MPIJob:
# not running them keeps an MPIJob's review as cheap as before TrainJobs were guarded.
_TRAINJOB_ONLY = ("training-runtime",)
MPIJOB_RULES: tuple[Rule, ...] = tuple(rule for rule in RULES if rule.id not in _TRAINJOB_ONLY)

MUTATIONS: tuple[Mutation, ...] = (
    IstioSidecarOff(),
    KueueQueueLabel(),
    RestrictedServiceAccount(),
)


def _check_unique(items: tuple, kind: str) -> None:
    ids = [item.id for item in items]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise RuntimeError(f"duplicate {kind} ids: {sorted(duplicates)}")


_check_unique(RULES + MUTATIONS, "rule/mutation")
RULE_IDS = tuple(r.id for r in RULES)
MUTATION_IDS = tuple(m.id for m in MUTATIONS)


def default_settings(rules: Sequence[Rule] | None = None, mutations: Sequence[Mutation] | None = None) -> Settings:
    """Every rule (mutation) of the registry, or of the ones given, at its defaults: the embedded
    policy the webhook serves with when the admin gives none."""
    return Settings(
        rules={r.id: RuleConfig(r.default_action, r.Params()) for r in (RULES if rules is None else rules)},
        mutations={m.id: MutationConfig(m.enabled_by_default, m.Params())
                   for m in (MUTATIONS if mutations is None else mutations)},
    )
