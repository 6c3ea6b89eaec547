"""The policy file's TrainJob checks as ValidatingAdmissionPolicies: the rules of
``policies.vap.policy_objects``, matching ``trainer.kubeflow.org`` ``trainjobs``, with the
training runtime as ``params``.

A TrainJob alone does not say whether it is an MPI job, nor its pod counts: its runtime (a
ClusterTrainingRuntime, or a TrainingRuntime of its namespace) does. Each policy names a runtime
kind as its ``paramKind``, and its binding selects every object of that kind
(``paramRef.selector: {}``, ``parameterNotFoundAction: Allow``): the API server evaluates the
policy once per runtime, live from its informer, and ANDs the answers. Each check judges only
with the runtime the TrainJob names, and only when it is an MPI runtime (``judged``); every
other runtime passes it. So one set of policies per runtime kind.

Kueue admitting or stopping a TrainJob (only its own ``runtimePatches`` entry and
``spec.suspend`` changed, by a request from one of the policy's ``kueueUsernames``) always
passes, as in the webhook; the same change from anyone else is checked. On v2.1 Kueue writes
``podTemplateOverrides`` entries instead (labelled ``kueue.x-k8s.io/podset``): they set only
placement, which no exported rule reads, so the update passes by ratcheting.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import ModuleType

from policies.trainer.api import (
    API_VERSION as TRAINER_API_VERSION,
    AUTO,
    CLUSTER_TRAINING_RUNTIME,
    GROUP,
    KUEUE_MANAGER,
    TRAINING_RUNTIME,
    TRAINJOB,
    TRAINJOBS,
    VERSION,
    ApiShape,
)
from policies.vap import cel_text as cel, namespaces
from policies.vap.policy_model import Override, Policy
from policies.vap.policy_objects import DEFAULT_PREFIX, ExportedRule, Target, export_rule
from policies.vap.rules import (
    gpus_per_worker_trainjob_cel as gpus_per_worker,
    job_name_trainjob_cel as job_name,
    launcher_trainjob_cel as launcher,
    slots_per_worker_trainjob_cel as slots_per_worker,
    training_runtime_cel as training_runtime,
    worker_count_trainjob_cel as worker_count,
)
from policies.vap.trainjob_fields_cel import Reading

# In the order the webhook runs and reports them.
TRAINJOB_EXPORTED: tuple[ModuleType, ...] = (job_name, launcher, worker_count, slots_per_worker, training_runtime,
                                             gpus_per_worker)
TRAINJOB_EXPORTED_RULES = tuple(m.RULE for m in TRAINJOB_EXPORTED)
# What ``export vap`` writes unless asked for every rule: each TrainJob check is a set of
# policies per runtime kind, and those that merge the runtime with the TrainJob's patches are
# 20-25 KB each, too much for a person to review (issue 26: at most 150 KB for the default
# export). These two decide the pod counts a quota sees; the rest are left to the webhook
# (docs/vap.md, "Left to the webhook").
TRAINJOB_DEFAULT_RULES = (launcher.RULE, worker_count.RULE)
SHAPE_RULE = "training-runtime"  # its apiShape parameter pins the TrainJob API the cluster serves
# Object names: <prefix>-trainjob-<rule>[-<action>] judge with ClusterTrainingRuntimes,
# <prefix>-trainjob-ns-<rule>[-<action>] with the TrainingRuntimes of the TrainJob's namespace.
INFIXES = {CLUSTER_TRAINING_RUNTIME: "trainjob-", TRAINING_RUNTIME: "trainjob-ns-"}
LONGEST_INFIX = max(len(i) for i in INFIXES.values())


def export_trainjobs(policy: Policy, prefix: str = DEFAULT_PREFIX,
                     rules: Sequence[str] = TRAINJOB_DEFAULT_RULES) -> list[ExportedRule]:
    """The policies of ``rules`` (of ``TRAINJOB_EXPORTED_RULES``), one set per runtime kind."""
    assert set(rules) <= set(TRAINJOB_EXPORTED_RULES), rules
    exported = []
    for kind in (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME):
        reading = _reading(policy, kind)
        target = Target(TRAINJOB, GROUP, VERSION, TRAINJOBS, INFIXES[kind], (TRAINER_API_VERSION, kind),
                        (*reading.variables(), ("kueueAdmission", kueue_admission(policy.kueue_usernames))), reading.judged(),
                        "(variables.kueueAdmission)")
        for module in (m for m in TRAINJOB_EXPORTED if m.RULE in rules):
            exported += export_rule(policy, prefix, module.RULE, module.validations(reading), target)
    return exported


def _reading(policy: Policy, kind: str) -> Reading:
    """Which patch lists the policy reads: those of every API shape the policy file lets some
    namespace have (``apiShape`` auto: both)."""
    def shape_of(override: Override) -> str | None:
        patch = override.patch.rules.get(SHAPE_RULE)
        return patch.params.get("api_shape") if patch is not None else None

    shapes = set(namespaces.possible_values(policy, policy.settings.rules[SHAPE_RULE].params.api_shape, shape_of))
    overrides = bool(shapes & {AUTO, ApiShape.V2_1.value})
    runtime_patches = bool(shapes - {ApiShape.V2_1.value})
    return Reading(kind, overrides, runtime_patches)


def kueue_admission(kueue_usernames: Iterable[str]) -> str:
    """An UPDATE by Kueue's controller that changes only ``spec.suspend`` and Kueue's own
    runtimePatches entry (an entry is Kueue's by its manager's name only: anyone can write it)."""
    ignored = cel.strings(("suspend", "runtimePatches"))
    new, old = f"{cel.NEW}.spec", f"{cel.OLD}.spec"

    def without_kueue(spec: str) -> str:
        return (f"(has({spec}.runtimePatches) ? {spec}.runtimePatches.filter(p, !(has(p.manager) && "
                f"p.manager == {cel.string(KUEUE_MANAGER)})) : [])")

    return cel.all_of([
        cel.UPDATE, f"request.userInfo.username in {cel.strings(sorted(kueue_usernames))}",
        f"has({cel.NEW}.spec)", f"has({cel.OLD}.spec)",
        f"{new}.all(k, k in {ignored} || (k in {old} && {old}[k] == {new}[k]))",
        f"{old}.all(k, k in {ignored} || k in {new})",
        f"{without_kueue(new)} == {without_kueue(old)}",
    ])
