"""Reading a TrainJob and its training runtime in CEL, the way ``policies.trainer.effective_job``
reads them in Python: every field optional, an absent map or list read as empty.

The runtime is the policy's ``params`` (a ClusterTrainingRuntime or a TrainingRuntime, handed in
by the API server). The TrainJob's own patches (v2.2+ ``spec.runtimePatches``, v2.1
``spec.podTemplateOverrides``) are applied by the Trainer controller with a strategic merge,
which CEL cannot do: a check that reads something a patch writes does not judge (``Reading``
says whether some patch writes it, exactly enough to pass rather than guess). No patch can write
a container's resources: both shapes' CRDs let a patched container carry only its name, env and
volumeMounts (and securityContext on v2.2+), and prune the rest.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from policies.trainer.api import ANCESTOR_LABEL, ANCESTOR_TRAINER, CLUSTER_TRAINING_RUNTIME, GROUP, LAUNCHER, NODE
from policies.vap import cel_text as cel

RUNTIME = "params"
RUNTIME_REF = "spec.runtimeRef.name"
RUNTIME_JOBS = "spec.template.spec.replicatedJobs"
JOBS = "variables.runtimeJobs"
JOB_NAMES = "variables.runtimeJobNames"
LAUNCHER_AS_NODE = "variables.launcherAsNode"
LABEL = "variables.runtimeLabel"  # "ClusterTrainingRuntime mpi-cuda": how messages name the runtime

PodCheck = Callable[[str], str]  # a pod spec's CEL → CEL bool


def trainer_present(root: str, name: str) -> str:
    return f"({cel.present(root, 'spec', 'trainer', name)})"


def trainer_field(root: str, name: str) -> str:
    return f"{root}.spec.trainer.{name}"


def is_int(value: str) -> str:
    return f"type({value}) == int"


def at_least_one(value: str) -> str:
    return f"({value} > 1 ? {value} : 1)"


# --- a replicated job of the runtime (``j``: one element of its replicatedJobs) --------------
def job_named(j: str, name: str) -> str:
    return f"(has({j}.name) && {j}.name == {cel.string(name)})"


def is_ancestor(j: str) -> str:
    labels = f"{j}.template.metadata.labels"
    return (f"(has({j}.template) && has({j}.template.metadata) && has({labels}) && "
            f"{cel.string(ANCESTOR_LABEL)} in {labels} && {labels}[{cel.string(ANCESTOR_LABEL)}] == "
            f"{cel.string(ANCESTOR_TRAINER)})")


def pod_spec_present(j: str) -> str:
    return f"has({j}.template) && has({j}.template.spec) && has({j}.template.spec.template) && " \
           f"has({j}.template.spec.template.spec)"


def containers(j: str) -> str:
    pod = f"{j}.template.spec.template.spec"
    return f"({pod_spec_present(j)} && has({pod}.containers) ? {pod}.containers : [])"


def has_node_container(j: str) -> str:
    return f"{containers(j)}.exists(c, {job_named('c', NODE)})"


def replicas(j: str) -> str:
    """JobSet replicas of the job: 1 for the trainer's ancestor (the controller sets it)."""
    return f"({is_ancestor(j)} ? 1 : (has({j}.replicas) ? {j}.replicas : 1))"


def ml_num_nodes_set() -> str:
    return f"has({RUNTIME}.spec.mlPolicy.numNodes)"  # read only once the MPI policy is known to be set


def count_set(j: str) -> str:
    """Whether the runtime writes the job's pods per Job (the ancestor's: mlPolicy.numNodes)."""
    return f"({is_ancestor(j)} ? {ml_num_nodes_set()} : (has({j}.template) && has({j}.template.spec) && " \
           f"has({j}.template.spec.parallelism)))"


def count(j: str) -> str:
    """Pods per Job as the runtime sets them (before the TrainJob's numNodes), at least 1."""
    parallelism = f"{j}.template.spec.parallelism"
    ancestor = f"({ml_num_nodes_set()} ? {at_least_one(f'{RUNTIME}.spec.mlPolicy.numNodes')} : 1)"
    own = (f"(has({j}.template) && has({j}.template.spec) && has({parallelism}) ? {at_least_one(parallelism)} : 1)")
    return f"({is_ancestor(j)} ? {ancestor} : {own})"


def count_path(j: str) -> str:
    """Where the runtime writes the job's pod count, as messages name it."""
    return (f"({is_ancestor(j)} ? 'spec.mlPolicy.numNodes' : '{RUNTIME_JOBS}[' + "
            f"string({JOB_NAMES}.indexOf({j}.name)) + '].template.spec.parallelism')")


def named_jobs(name: str) -> str:
    """The runtime's jobs called ``name`` (a list of at most one: the runtime's list is a map by name)."""
    return f"{JOBS}.filter(j, {job_named('j', name)})"


@dataclass(frozen=True)
class Reading:
    """How a policy reads TrainJobs: which runtime kind its params are, and which patch lists
    can occur in the namespaces it enforces in (the policy file's ``apiShape``)."""

    runtime_kind: str = CLUSTER_TRAINING_RUNTIME
    overrides: bool = True  # v2.1 spec.podTemplateOverrides
    runtime_patches: bool = True  # v2.2+ spec.runtimePatches

    # --- whether this policy judges this runtime -------------------------------------------
    def judged(self) -> str:
        """The params are the runtime the TrainJob names, and an MPI runtime: the only case the
        webhook checks (any other runtime, kind or group: allowed untouched)."""
        ref = f"{cel.NEW}.spec.runtimeRef"
        kind = f"(has({ref}.kind) && {ref}.kind != '' ? {ref}.kind : {cel.string(CLUSTER_TRAINING_RUNTIME)})"
        group = f"(has({ref}.apiGroup) && {ref}.apiGroup != '' ? {ref}.apiGroup : {cel.string(GROUP)})"
        return cel.all_of([
            cel.present(cel.NEW, "spec", "runtimeRef", "name"),
            f"{kind} == {cel.string(self.runtime_kind)}",
            f"{group} == {cel.string(GROUP)}",
            cel.present(RUNTIME, "metadata", "name"),
            f"{RUNTIME}.metadata.name == {ref}.name",
            cel.present(RUNTIME, "spec", "mlPolicy", "mpi"),
        ])

    def variables(self) -> tuple[tuple[str, str], ...]:
        jobs = f"{RUNTIME}.spec.template.spec.replicatedJobs"
        return (
            ("runtimeJobs", f"{cel.present(RUNTIME, 'spec', 'template', 'spec', 'replicatedJobs')} ? {jobs} : []"),
            ("runtimeJobNames", f"{JOBS}.map(x, has(x.name) ? x.name : '')"),
            ("launcherAsNode", f"{cel.present(RUNTIME, 'spec', 'mlPolicy', 'mpi', 'runLauncherAsNode')} && "
                               f"{RUNTIME}.spec.mlPolicy.mpi.runLauncherAsNode == true"),
            ("runtimeLabel", f"{cel.string(self.runtime_kind + ' ')} + {RUNTIME}.metadata.name"),
            *_job_variables(LAUNCHER, LAUNCHER_JOBS),
            *_job_variables(NODE, NODE_JOBS),
        )

    # --- what the TrainJob's patches write -------------------------------------------------
    def _patch_jobs(self, root: str) -> str:
        return (f"(has(p.trainingRuntimeSpec) && has(p.trainingRuntimeSpec.template) && "
                f"has(p.trainingRuntimeSpec.template.spec) && has(p.trainingRuntimeSpec.template.spec.replicatedJobs) "
                f"? p.trainingRuntimeSpec.template.spec.replicatedJobs : [])")

    def _job_patch(self, root: str, job: str, check: str) -> str:
        """Some runtimePatches entry patches the job ``job`` and ``check`` (of its patch ``j``) holds."""
        if not self.runtime_patches:
            return "false"
        patches = f"{root}.spec.runtimePatches"
        return (f"(has({root}.spec) && has({patches}) && {patches}.exists(p, {self._patch_jobs(root)}.exists(j, "
                f"{job_named('j', job)} && {check})))")

    def adds_job(self, root: str, job: str) -> str:
        """A patch names the job: on v2.3 the whole JobSet spec is merged, so it may add it."""
        return self._job_patch(root, job, "true")

    def writes_ancestor_label(self, root: str, job: str) -> str:
        labels = "j.template.metadata.labels"
        return self._job_patch(root, job, f"has(j.template) && has(j.template.metadata) && has({labels}) && "
                                          f"{cel.string(ANCESTOR_LABEL)} in {labels}")

    def writes_any_ancestor_label(self, root: str) -> str:
        """Some patch writes the ancestor label of some job (it moves pod counts between jobs)."""
        if not self.runtime_patches:
            return "false"
        labels = "j.template.metadata.labels"
        patches = f"{root}.spec.runtimePatches"
        return (f"(has({root}.spec) && has({patches}) && {patches}.exists(p, {self._patch_jobs(root)}.exists(j, "
                f"has(j.template) && has(j.template.metadata) && has({labels}) && "
                f"{cel.string(ANCESTOR_LABEL)} in {labels})))")

    def adds_unknown_job(self, root: str) -> str:
        """Some patch names a job the runtime lacks (v2.3 adds it)."""
        if not self.runtime_patches:
            return "false"
        patches = f"{root}.spec.runtimePatches"
        return (f"(has({root}.spec) && has({patches}) && {patches}.exists(p, {self._patch_jobs(root)}.exists(j, "
                f"!(j.name in {JOB_NAMES}))))")

    def patches_pod(self, root: str, job: str, check: PodCheck) -> str:
        """Some patch of the pod template of job ``job`` has ``check`` true of its pod spec."""
        parts = []
        if self.runtime_patches:
            pod = "j.template.spec.template.spec"
            parts.append(self._job_patch(root, job, f"{pod_spec_present('j')} && {check(pod)}"))
        if self.overrides:
            overrides = f"{root}.spec.podTemplateOverrides"
            parts.append(f"(has({root}.spec) && has({overrides}) && {overrides}.exists(o, has(o.targetJobs) && "
                         f"o.targetJobs.exists(t, {job_named('t', job)}) && has(o.spec) && {check('o.spec')}))")
        return cel.any_of(parts)

    def adds_node_container(self, root: str, job: str) -> str:
        return self.patches_pod(root, job, lambda pod: f"has({pod}.containers) && "
                                                      f"{pod}.containers.exists(c, {job_named('c', NODE)})")



LAUNCHER_JOBS = "variables.launcherJobs"
NODE_JOBS = "variables.nodeJobs"
# The runtime's own pod counts (before the TrainJob's numNodes), computed once per evaluation
NODE_COUNT_SET = "variables.nodeCountSet"
NODE_COUNT = "variables.nodeCount"
NODE_PODS = "variables.nodePods"
NODE_COUNT_PATH = "variables.nodeCountPath"
LAUNCHER_PODS = "variables.launcherPods"
LAUNCHER_COUNT_PATH = "variables.launcherCountPath"


def _job_variables(name: str, jobs: str) -> tuple[tuple[str, str], ...]:
    job = f"{jobs}[0]"
    some = f"size({jobs}) > 0"
    pods = f"({replicas(job)} > 0 ? {replicas(job)} : 0) * {count(job)}"
    return (
        (f"{name}Jobs", named_jobs(name)),
        (f"{name}CountSet", f"{some} && {count_set(job)}"),
        (f"{name}Count", f"{some} ? {count(job)} : 1"),
        (f"{name}Pods", f"{some} ? {pods} : 0"),
        (f"{name}CountPath", f"{some} ? {count_path(job)} : ''"),
    )
