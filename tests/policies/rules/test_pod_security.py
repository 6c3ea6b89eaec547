"""``pod-security``: the namespace's PodSecurity labels (enforce, warn, audit and their versions)
applied to the job's pod templates, the policy's own level, its exceptions and the API server's
exemptions stated again."""
import pytest

from policies.cluster_view import StaticClusterView
from policies.config.reader import parse_policy
from policies.engine import evaluate
from policies.interface import Action, Problem
from policies.registry import default_settings
from policies.rules.pod_security import CHECK_IDS, PodSecurity
from testing.builders import context, mpijob
from testing.kube_objects import namespace

RULE = PodSecurity()
ENFORCE = "pod-security.kubernetes.io/enforce"
WORKER = "spec.mpiReplicaSpecs[Worker].template.spec.containers[0].securityContext"
LAUNCHER = "spec.mpiReplicaSpecs[Launcher].template.spec.containers[0].securityContext"
APE = "allowPrivilegeEscalation"


RESTRICTED_CONTAINER = {APE: False, "capabilities": {"drop": ["ALL"]}}


def hardened(job):
    """Both templates with all that restricted asks, at every version."""
    for role in ("Launcher", "Worker"):
        spec = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        spec["securityContext"] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
        for container in spec["containers"]:
            container["securityContext"] = dict(RESTRICTED_CONTAINER)
    return job


def privileged_worker(**context_fields):
    job = hardened(mpijob())
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["securityContext"] = {
        **RESTRICTED_CONTAINER, "privileged": True, **context_fields}
    return job


def findings(job, labels=None, policy="{}", ns="team-a"):
    settings = parse_policy(policy).settings_for(ns)
    cluster = StaticClusterView(namespaces={ns: namespace(ns, labels)} if labels is not None else {})
    return list(RULE.check(context(job, cluster=cluster, settings=settings, namespace=ns)))


def paths(found):
    return [(f.path, f.ceiling) for f in found]


def test_the_hardened_job_passes_restricted():
    assert findings(hardened(mpijob()), {ENFORCE: "restricted"}) == []


def test_a_privileged_worker_is_denied_with_the_field_the_check_and_what_to_write():
    privileged, escalation = findings(privileged_worker(**{APE: True}), {ENFORCE: "restricted"})
    assert privileged.path == f"{WORKER}.privileged"
    assert privileged.ceiling is Action.DENY and privileged.problem is Problem.POLICY
    assert privileged.message == (
        'the Worker pods violate PodSecurity "restricted:latest" of namespace team-a '
        '(pod-security.kubernetes.io/enforce): check privileged, container "mpi-worker"; '
        'allowed: false, or unset; set securityContext.privileged: false, or remove it')
    assert escalation.path == f"{WORKER}.{APE}"
    assert escalation.message == (
        'the Worker pods violate PodSecurity "restricted:latest" of namespace team-a '
        '(pod-security.kubernetes.io/enforce): check allowPrivilegeEscalation, container "mpi-worker": '
        'allowPrivilegeEscalation != false; allowed: false; set securityContext.allowPrivilegeEscalation: false')


def test_the_launcher_is_named_when_its_template_fails():
    job = hardened(mpijob())
    del job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["securityContext"][APE]
    (finding,) = findings(job, {ENFORCE: "restricted"})
    assert finding.path == f"{LAUNCHER}.{APE}"
    assert finding.message.startswith('the Launcher pods violate PodSecurity "restricted:latest"')


def test_no_label_no_policy_level_nothing_checked():
    assert findings(privileged_worker(), {}) == []
    assert findings(privileged_worker(), None) == []  # a namespace the cache does not hold: unlabelled


def test_warn_namespace_warns_and_audit_namespace_audits():
    warned = findings(privileged_worker(), {"pod-security.kubernetes.io/warn": "baseline"})
    assert paths(warned) == [(f"{WORKER}.privileged", Action.WARN)]
    assert warned[0].message == ('Worker pods would violate PodSecurity "baseline:latest" (warn label): check '
                                 'privileged; set securityContext.privileged: false, or remove it')
    audited = findings(privileged_worker(**{APE: True}), {"pod-security.kubernetes.io/audit": "restricted"})
    assert paths(audited) == [(f"{WORKER}.privileged", Action.AUDIT), (f"{WORKER}.{APE}", Action.AUDIT)]


def test_each_problem_once_at_its_strongest_action():
    labels = {ENFORCE: "baseline", "pod-security.kubernetes.io/warn": "restricted",
              "pod-security.kubernetes.io/audit": "restricted"}
    found = findings(privileged_worker(**{APE: True}), labels)
    assert paths(found) == [(f"{WORKER}.privileged", Action.DENY), (f"{WORKER}.{APE}", Action.WARN)]


def test_a_warning_fits_the_256_characters_the_api_server_passes_on():
    from policies.messages import fits_warning
    for finding in findings(privileged_worker(**{APE: True}), {"pod-security.kubernetes.io/warn": "restricted"}):
        assert fits_warning(finding.rule, finding.path, finding.message), finding.message


def windows_job_without_escalation_field():
    job = hardened(mpijob())
    for role in ("Launcher", "Worker"):
        spec = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        spec["os"] = {"name": "windows"}
        del spec["containers"][0]["securityContext"][APE]
    return job


@pytest.mark.parametrize(("version", "denied"), [("v1.24", True), ("v1.25", False), ("latest", False),
                                                 (None, False), ("v1.7", False)])
def test_a_pinned_enforce_version_changes_the_verdict_where_upstream_versions_differ(version, denied):
    # allowPrivilegeEscalation exists from v1.8 and exempts Windows pods from v1.25
    labels = {ENFORCE: "restricted"} | ({f"{ENFORCE}-version": version} if version else {})
    found = findings(windows_job_without_escalation_field(), labels)
    expected = [f"{LAUNCHER}.{APE}", f"{WORKER}.{APE}"] if denied else []
    assert [f.path for f in found] == expected
    if denied:
        assert f'"restricted:{version}"' in found[0].message


def test_invalid_labels_are_read_as_the_api_server_reads_them():
    found = findings(privileged_worker(**{APE: False}), {ENFORCE: "strict"})
    assert [(f.path, f.ceiling) for f in found] == [("", Action.AUDIT), (f"{WORKER}.privileged", Action.DENY)]
    assert 'PodSecurity "restricted:latest"' in found[1].message
    assert found[0].message == (
        "namespace team-a has PodSecurity labels the API server cannot read (metadata.labels[pod-security.kubernetes.io/"
        'enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted); it evaluates pods as if '
        "the enforce level were restricted and the warn and audit levels privileged: fix the labels")


def test_the_policy_default_level_applies_only_to_namespaces_without_an_enforce_label():
    policy = "rules: {pod-security: {params: {defaultLevel: baseline}}}"
    (finding,) = findings(privileged_worker(), {}, policy)
    assert finding.path == f"{WORKER}.privileged" and finding.ceiling is Action.DENY
    assert 'PodSecurity "baseline:latest" of the policy (defaultLevel, the namespace has no enforce label)' \
        in finding.message
    assert findings(privileged_worker(), {ENFORCE: "privileged"}, policy) == []


def test_a_minimum_level_for_chosen_namespaces_through_an_override():
    policy = ("overrides: [{name: strict, namespaces: [secure], rules: {pod-security: "
              "{params: {minimumLevel: restricted, minimumVersion: v1.24}}}}]")
    assert findings(privileged_worker(), {ENFORCE: "baseline"}, policy, ns="team-a")[0].ceiling is Action.DENY
    found = findings(privileged_worker(**{APE: True}), {ENFORCE: "baseline"}, policy, ns="secure")
    assert [f.path for f in found] == [f"{WORKER}.privileged", f"{WORKER}.{APE}"]
    assert "of namespace secure (pod-security.kubernetes.io/enforce)" in found[0].message
    assert 'PodSecurity "restricted:v1.24" of the policy (minimumLevel)' in found[1].message


def test_exceptions_relax_the_policys_own_level_never_the_namespaces():
    policy = ("rules: {pod-security: {params: {minimumLevel: restricted, "
              "exceptions: {checks: [allowPrivilegeEscalation]}}}}")
    job = hardened(mpijob())
    for role in ("Launcher", "Worker"):  # no allowPrivilegeEscalation: false anywhere
        del job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]["securityContext"][APE]
    assert findings(job, {ENFORCE: "baseline"}, policy) == []
    assert findings(job, {}, policy) == []
    enforced = findings(job, {ENFORCE: "restricted"}, policy)
    assert [f.path for f in enforced] == [f"{LAUNCHER}.{APE}", f"{WORKER}.{APE}"]
    assert all("(pod-security.kubernetes.io/enforce)" in f.message for f in enforced)


def test_exemptions_mirror_the_api_servers_and_leave_the_policys_own_level():
    job = privileged_worker()
    by_user = "rules: {pod-security: {params: {exemptions: {usernames: [system:serviceaccount:mpi-operator:mpi-operator]}}}}"
    assert findings(job, {ENFORCE: "baseline"}, by_user) == []  # the worker pods come from the MPI operator
    launcher_only = ("rules: {pod-security: {params: {exemptions: "
                     "{usernames: [system:serviceaccount:kube-system:job-controller]}}}}")
    assert [f.path for f in findings(job, {ENFORCE: "baseline"}, launcher_only)] == [f"{WORKER}.privileged"]
    by_namespace = "rules: {pod-security: {params: {exemptions: {namespaces: [team-a]}, minimumLevel: baseline}}}"
    (finding,) = findings(job, {ENFORCE: "restricted"}, by_namespace)
    assert "of the policy (minimumLevel)" in finding.message
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["runtimeClassName"] = "kata"
    by_class = "rules: {pod-security: {params: {exemptions: {runtimeClasses: [kata]}}}}"
    assert findings(job, {ENFORCE: "baseline"}, by_class) == []


@pytest.mark.parametrize(("params", "problem"), [
    ("{defaultVersion: '1.29'}", "defaultVersion '1.29': must be \"latest\" or \"v1.x\""),
    ("{minimumLevel: strict}", "unsupported value 'strict': must be one of privileged, baseline, restricted"),
    ("{apiServerVersion: '1.36'}", "apiServerVersion '1.36': must be \"latest\" or \"v1.x\""),
    ("{exceptions: {checks: [privilegedd]}}", "unsupported value 'privilegedd': must be one of allowPrivilegeEscalation, appArmorProfile"),
])
def test_bad_parameters_make_the_policy_invalid(params, problem):
    from policies.config.problems import PolicyError
    with pytest.raises(PolicyError) as raised:
        parse_policy(f"rules: {{pod-security: {{params: {params}}}}}")
    assert problem in str(raised.value)


def test_through_the_engine_a_violation_denies_with_403_semantics_and_unavailable_cluster_skips():
    settings = default_settings()
    cluster = StaticClusterView(namespaces={"team-a": namespace("team-a", {ENFORCE: "baseline"})})
    verdict = evaluate(context(privileged_worker(), cluster=cluster, settings=settings))
    assert [f.rule for f in verdict.denials] == ["pod-security"] and verdict.is_policy_denial
    skipped = evaluate(context(privileged_worker(), settings=settings))
    assert "pod-security" in skipped.skipped and skipped.allowed


def test_the_check_ids_exceptions_may_name_are_the_engines():
    from policies.kube.pod_security.check_registry import all_checks
    assert set(CHECK_IDS) == {check.check_id for check in all_checks()}


def test_a_capability_exception_relaxes_the_policys_restricted_not_a_baseline_label():
    job = hardened(mpijob())
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["securityContext"][
        "capabilities"] = {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    strict = "rules: {pod-security: {params: {minimumLevel: restricted}}}"
    (added,) = findings(job, {}, strict)
    assert added.path == f"{WORKER}.capabilities.add[0]"
    assert "of the policy (minimumLevel): check capabilities_restricted" in added.message
    excepted = "rules: {pod-security: {params: {minimumLevel: restricted, exceptions: {capabilities: [IPC_LOCK]}}}}"
    assert findings(job, {}, excepted) == []
    assert findings(job, {ENFORCE: "privileged"}, excepted) == []
    (enforced,) = findings(job, {ENFORCE: "baseline"}, excepted)
    assert "(pod-security.kubernetes.io/enforce): check capabilities_baseline" in enforced.message
    assert enforced.ceiling is Action.DENY


def sysctl_job(name):
    job = hardened(mpijob())
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["securityContext"]["sysctls"] = [
        {"name": name, "value": "0"}]
    return job


@pytest.mark.parametrize(("policy", "denied"), [
    ("{}", True),  # a 1.36 API server: latest is v1.36, which does not allow the sysctl yet
    ("{rules: {pod-security: {params: {apiServerVersion: v1.37}}}}", False),  # v1.37 added it
    ("{rules: {pod-security: {params: {apiServerVersion: latest}}}}", False),  # every version we know
])
def test_latest_is_the_api_servers_own_version(policy, denied):
    """Upstream v1.37 adds net.ipv4.tcp_slow_start_after_idle to the safe sysctls; an API server of
    1.36 evaluates 'latest' (and v1.37) as v1.36 and refuses it."""
    found = findings(sysctl_job("net.ipv4.tcp_slow_start_after_idle"), {ENFORCE: "baseline"}, policy=policy)
    assert [f.path for f in found] == (
        ["spec.mpiReplicaSpecs[Worker].template.spec.securityContext.sysctls[0].name"] if denied else [])
    if denied:
        assert 'PodSecurity "baseline:latest"' in found[0].message
