"""Pod Security's levels, versions and namespace labels (upstream's api/helpers_test.go), the
registry's arrangement of checks (policy/registry_test.go), the API server's aggregated texts, and
pods of any shape evaluated without an exception."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.kube.pod_security import (
    AUDIT_LABEL, AUDIT_VERSION_LABEL, ENFORCE_LABEL, ENFORCE_VERSION_LABEL, PRIVILEGED_POLICY, WARN_LABEL,
    WARN_VERSION_LABEL, CheckResult, Fix, LevelVersion, NamespacePolicy, evaluate_pod, forbidden_message,
    newest_policy_version, parse_level, parse_version, policy_to_evaluate, would_violate_message)
from policies.kube.pod_security.check_registry import Check, VersionedCheck, build_tables, check_tables
from policies.kube.pod_security.go_strings import go_quote
from policies.kube.pod_security.pod_fields import PodView


@pytest.mark.parametrize(("text", "version"), [
    ("latest", None), ("v1.0", (1, 0)), ("v1.1", (1, 1)), ("v1.20", (1, 20)), ("v1.10000", (1, 10000))])
def test_parse_version_reads_what_upstream_reads(text, version):
    assert parse_version(text) == version


@pytest.mark.parametrize("text", ["foo", "", "v2.0", "v1", "1.1", "v1.05", "v1.1\n", " v1.1", "V1.1", "v1.1.0",
                                  "v1.٣", "latest ", "Latest", "v1.99999999999999999999"])
def test_parse_version_refuses_what_upstream_refuses(text):
    with pytest.raises(ValueError, match='^must be "latest" or "v1.x"$'):
        parse_version(text)


def test_parse_level_names_the_allowed_levels():
    assert [parse_level(level) for level in ("privileged", "baseline", "restricted")] == [
        "privileged", "baseline", "restricted"]
    for text in ("", "Restricted", "restricted ", "foo"):
        with pytest.raises(ValueError, match="^must be one of privileged, baseline, restricted$"):
            parse_level(text)


def test_a_level_version_prints_as_upstreams():
    assert [str(LevelVersion("restricted", None)), str(LevelVersion("baseline", (1, 29)))] == [
        "restricted:latest", "baseline:v1.29"]


def labels(**pairs: str) -> dict[str, str]:
    """Upstream's makeLabels: the PodSecurity labels by short name, beside an unrelated label."""
    return {"other-label": "foo-bar", **{f"pod-security.kubernetes.io/{key.replace('_', '-')}": value
                                         for key, value in pairs.items()}}


PRIVILEGED_LV = LevelVersion("privileged", None)


@pytest.mark.parametrize(("namespace_labels", "expected", "has_errors"), [
    (labels(enforce="baseline"), (("baseline", None), PRIVILEGED_LV, ("baseline", None)), False),
    (labels(warn="restricted"), (PRIVILEGED_LV, PRIVILEGED_LV, ("restricted", None)), False),
    (labels(audit="baseline"), (PRIVILEGED_LV, ("baseline", None), PRIVILEGED_LV), False),
    (labels(enforce="baseline", warn="restricted"), (("baseline", None), PRIVILEGED_LV, ("restricted", None)), False),
    (labels(enforce="baseline", enforce_version="v1.22"),
     (("baseline", (1, 22)), PRIVILEGED_LV, ("baseline", (1, 22))), False),
    (labels(enforce="baseline", enforce_version="v1.22", warn_version="latest"),
     (("baseline", (1, 22)), PRIVILEGED_LV, ("baseline", None)), False),
    (labels(enforce="baseline", warn_version="v1.23"), (("baseline", None), PRIVILEGED_LV, ("baseline", (1, 23))), False),
    (labels(enforce="baseline", enforce_version="v1.20", warn="restricted", warn_version="v1.21", audit="restricted",
            audit_version="v1.22"),
     (("baseline", (1, 20)), ("restricted", (1, 22)), ("restricted", (1, 21))), False),
    (labels(enforce="baseline", warn="privileged"), (("baseline", None), PRIVILEGED_LV, PRIVILEGED_LV), False),
    (labels(enforce="baseline", warn="foo"), (("baseline", None), PRIVILEGED_LV, PRIVILEGED_LV), True),
    (labels(enforce="foo"), (("restricted", None), PRIVILEGED_LV, PRIVILEGED_LV), True),
    (labels(enforce="baseline", enforce_version="v1.x"), (("baseline", None), PRIVILEGED_LV, ("baseline", None)), True),
    ({}, (PRIVILEGED_LV, PRIVILEGED_LV, PRIVILEGED_LV), False),
], ids=["simple enforce", "simple warn", "simple audit", "enforce & warn", "enforce version",
        "enforce version & warn-version", "enforce & warn-version", "fully specd", "enforce no warn",
        "enforce warn error", "enforce error", "enforce version error", "no labels"])
def test_namespace_labels_give_upstreams_policy(namespace_labels, expected, has_errors):
    """api/helpers_test.go's TestPolicyToEvaluate, with the API server's default (privileged) policy."""
    policy, errors = policy_to_evaluate(namespace_labels)
    assert policy == NamespacePolicy(*(LevelVersion(*lv) for lv in expected))
    assert bool(errors) == has_errors


def test_an_invalid_label_reads_as_upstreams_field_error():
    assert policy_to_evaluate({ENFORCE_LABEL: "Restricted", AUDIT_VERSION_LABEL: "1.29", WARN_LABEL: "x\ty"})[1] == [
        'metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "Restricted": '
        "must be one of privileged, baseline, restricted",
        'metadata.labels[pod-security.kubernetes.io/audit-version]: Invalid value: "1.29": must be "latest" or "v1.x"',
        'metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: "x\\ty": '
        "must be one of privileged, baseline, restricted",
    ]


def test_defaults_fill_what_the_labels_leave_out():
    defaults = NamespacePolicy(LevelVersion("baseline", (1, 30)), LevelVersion("restricted", None),
                               LevelVersion("baseline", None))
    assert policy_to_evaluate({}, defaults) == (defaults, [])
    assert policy_to_evaluate({ENFORCE_VERSION_LABEL: "v1.25", WARN_VERSION_LABEL: "v1.24"}, defaults) == (
        NamespacePolicy(LevelVersion("baseline", (1, 25)), LevelVersion("restricted", None),
                        LevelVersion("baseline", (1, 24))), [])
    assert PRIVILEGED_POLICY == NamespacePolicy(PRIVILEGED_LV, PRIVILEGED_LV, PRIVILEGED_LV)
    assert WARN_LABEL.endswith("/warn") and AUDIT_LABEL.endswith("/audit")


# policy/registry_test.go: synthetic checks whose reason names the check and the revision that ran.
def generate_check(check_id: str, level: str, versions: list[str], overrides: tuple[str, ...] = ()) -> Check:
    def revision(version: str) -> VersionedCheck:
        reason = f"{check_id}:{version}"
        parsed = parse_version(version)
        assert parsed is not None
        return VersionedCheck(parsed, lambda pod: CheckResult(check_id, reason, "", ()), overrides)
    return Check(check_id, level, tuple(revision(version) for version in versions))


def reasons(checks: list[Check], level: str, version: str) -> list[str]:
    tables = build_tables(checks)
    pod = PodView({}, {})
    return [check(pod).forbidden_reason for check in tables.checks_for(LevelVersion(level, parse_version(version)))]


REGISTRY_CHECKS = [
    generate_check("a", "baseline", ["v1.0"]),
    generate_check("b", "baseline", ["v1.10"]),
    generate_check("c", "baseline", ["v1.0", "v1.5", "v1.10"]),
    generate_check("d", "baseline", ["v1.11", "v1.15", "v1.20"]),
    generate_check("e", "restricted", ["v1.0"]),
    generate_check("f", "restricted", ["v1.12", "v1.16", "v1.21"]),
    generate_check("g", "restricted", ["v1.10"], ("a",)),
    generate_check("h", "restricted", ["v1.0"], ("b",)),
    Check("i", "restricted", (generate_check("i", "restricted", ["v1.10"], ("c",)).versions[0],
                              generate_check("i", "restricted", ["v1.21"], ("d",)).versions[0])),
]


@pytest.mark.parametrize(("level", "version", "expected"), [
    ("privileged", "v1.0", []), ("privileged", "latest", []),
    ("baseline", "v1.0", ["a:v1.0", "c:v1.0"]),
    ("baseline", "v1.4", ["a:v1.0", "c:v1.0"]),
    ("baseline", "v1.5", ["a:v1.0", "c:v1.5"]),
    ("baseline", "v1.10", ["a:v1.0", "b:v1.10", "c:v1.10"]),
    ("baseline", "v1.11", ["a:v1.0", "b:v1.10", "c:v1.10", "d:v1.11"]),
    ("baseline", "latest", ["a:v1.0", "b:v1.10", "c:v1.10", "d:v1.20"]),
    ("restricted", "v1.0", ["a:v1.0", "c:v1.0", "e:v1.0", "h:v1.0"]),
    ("restricted", "v1.4", ["a:v1.0", "c:v1.0", "e:v1.0", "h:v1.0"]),
    ("restricted", "v1.5", ["a:v1.0", "c:v1.5", "e:v1.0", "h:v1.0"]),
    ("restricted", "v1.10", ["e:v1.0", "g:v1.10", "h:v1.0", "i:v1.10"]),
    ("restricted", "v1.11", ["d:v1.11", "e:v1.0", "g:v1.10", "h:v1.0", "i:v1.10"]),
    ("restricted", "latest", ["c:v1.10", "e:v1.0", "f:v1.21", "g:v1.10", "h:v1.0", "i:v1.21"]),
    ("restricted", "v1.10000", ["c:v1.10", "e:v1.0", "f:v1.21", "g:v1.10", "h:v1.0", "i:v1.21"]),
])
def test_the_registry_arranges_checks_as_upstreams(level, version, expected):
    assert reasons(REGISTRY_CHECKS, level, version) == expected


@pytest.mark.parametrize(("level", "version", "expected"), [
    ("baseline", "v1.0", []), ("baseline", "v1.10", []), ("baseline", "latest", []),
    ("restricted", "v1.0", ["e:v1.0", "h:v1.0"]),
    ("restricted", "v1.10", ["e:v1.0", "g:v1.10", "h:v1.0"]),
    ("restricted", "latest", ["e:v1.0", "f:v1.21", "g:v1.10", "h:v1.0"]),
    ("restricted", "v1.10000", ["e:v1.0", "f:v1.21", "g:v1.10", "h:v1.0"]),
])
def test_a_registry_without_baseline_checks(level, version, expected):
    assert reasons([c for c in REGISTRY_CHECKS if c.level == "restricted" and c.check_id != "i"], level,
                   version) == expected


@pytest.mark.parametrize("level", ["baseline", "restricted"])
@pytest.mark.parametrize(("version", "expected"), [
    ("v1.0", ["a:v1.0", "c:v1.0"]), ("v1.4", ["a:v1.0", "c:v1.0"]), ("v1.5", ["a:v1.0", "c:v1.5"]),
    ("v1.10", ["a:v1.0", "b:v1.10", "c:v1.10"]), ("v1.11", ["a:v1.0", "b:v1.10", "c:v1.10", "d:v1.11"]),
    ("latest", ["a:v1.0", "b:v1.10", "c:v1.10", "d:v1.20"]),
])
def test_a_registry_without_restricted_checks_restricts_as_baseline(level, version, expected):
    assert reasons([c for c in REGISTRY_CHECKS if c.level == "baseline"], level, version) == expected


def test_an_empty_registry_checks_nothing():
    assert [reasons([], level, "latest") for level in ("privileged", "baseline", "restricted")] == [[], [], []]


def test_emulating_an_older_api_server_drops_the_newer_revisions():
    """TestHostProbesAndHostLifecycleEmulation: the 1.34 check is in "latest" unless the API server
    emulated is older than 1.34."""
    spec = {"containers": [{"name": "", "startupProbe": {"httpGet": {"host": "localhost"}}}]}
    for emulated, active in ((None, True), ((1, 34), True), ((1, 33), False)):
        for version in (None, (1, 34)):
            results = evaluate_pod(LevelVersion("baseline", version), {}, spec, emulation_version=emulated)
            assert bool(results) == active, (emulated, version)
        assert evaluate_pod(LevelVersion("baseline", (1, 33)), {}, spec, emulation_version=emulated) == []
    assert newest_policy_version() == (1, 37)
    assert newest_policy_version((1, 36)) == (1, 36)


def test_the_tables_are_built_once():
    assert check_tables() is check_tables()
    assert check_tables((1, 36)) is check_tables((1, 36))


RESULTS = [
    CheckResult("hostPorts", "hostPort", 'container "b" uses hostPort 20', (Fix("b", "f", "a", "w"),)),
    CheckResult("x", "no detail", "", ()),
    CheckResult("y", "", "d", ()),
]


def test_the_api_servers_aggregated_texts():
    """admission.go: ``violates PodSecurity %q: %s`` with AggregateCheckResult.ForbiddenDetail()."""
    assert forbidden_message(LevelVersion("restricted", None), RESULTS) == (
        'violates PodSecurity "restricted:latest": hostPort (container "b" uses hostPort 20), no detail, '
        "unknown forbidden reason (d)")
    assert would_violate_message(LevelVersion("baseline", (1, 29)), RESULTS[:1]) == (
        'would violate PodSecurity "baseline:v1.29": hostPort (container "b" uses hostPort 20)')


@pytest.mark.parametrize(("text", "quoted"), [
    ("plain", '"plain"'), ('say "hi"\\', r'"say \"hi\"\\"'), ("tab\there\n", r'"tab\there\n"'),
    ("\x00\x1b\x7f", r'"\x00\x1b\x7f"'), ("é ü 日本", '"é ü 日本"'), ("\u00a0\u2028\u200b", r'"\u00a0\u2028\u200b"'),
    ("\U0001f600", '"\U0001f600"'), ("\U000e0001", r'"\U000e0001"'), ("\a\b\f\v\r", r'"\a\b\f\v\r"'),
])
def test_go_quote_is_strconv_quote(text, quoted):
    assert go_quote(text) == quoted


def test_a_forbidden_annotation_value_is_quoted_as_go_quotes_it():
    annotations = {"container.apparmor.security.beta.kubernetes.io/app": 'un"con\nfined'}
    [result] = evaluate_pod(LevelVersion("baseline", None), {"annotations": annotations}, {})
    assert result.forbidden_detail == (
        'annotation must not set AppArmor profile type to '
        '"container.apparmor.security.beta.kubernetes.io/app="un\\"con\\nfined""')


def test_the_api_servers_defaults_are_applied_before_the_checks():
    """A volume without a source becomes an emptyDir; with hostNetwork, containerPorts become hostPorts."""
    restricted = LevelVersion("restricted", None)
    assert evaluate_pod(restricted, {}, {"volumes": [{"name": "v"}, {"name": "w", "secret": None}]}) == []
    assert [r.forbidden_detail for r in evaluate_pod(restricted, {}, {"volumes": [{"name": "v", "nfs": {}}]})] == [
        'volume "v" uses restricted volume type "nfs"']
    spec = {"hostNetwork": True, "containers": [{"name": "a", "ports": [{"containerPort": 8080}, {"containerPort": 9090,
                                                                                                 "hostPort": 80}]}],
            "ephemeralContainers": [{"name": "debug", "ports": [{"containerPort": 7000}]}]}
    host_ports = [r for r in evaluate_pod(LevelVersion("baseline", None), {}, spec) if r.check_id == "hostPorts"]
    assert [(r.forbidden_detail, [f.field for f in r.fixes]) for r in host_ports] == [
        ('container "a" uses hostPorts 80, 8080', ["spec.hostNetwork", "spec.containers[0].ports[1].hostPort"])]


# Any JSON, and the pod's own keys holding any JSON: the checks read it all without an exception.
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
                    max_leaves=4)


def shaped(keys: dict[str, Any]) -> st.SearchStrategy[Any]:
    return JSON | st.fixed_dictionaries({}, optional={key: JSON | value for key, value in keys.items()})


HANDLER = shaped({"httpGet": shaped({"host": JSON}), "tcpSocket": shaped({"host": JSON})})
SECURITY_CONTEXT = shaped({
    key: shaped({"type": JSON, "user": JSON, "role": JSON, "hostProcess": JSON, "add": st.lists(JSON),
                 "drop": st.lists(JSON)})
    for key in ("seccompProfile", "appArmorProfile", "seLinuxOptions", "windowsOptions", "capabilities")
} | {"sysctls": st.lists(shaped({"name": JSON})), "runAsNonRoot": JSON, "runAsUser": JSON, "privileged": JSON,
     "procMount": JSON, "allowPrivilegeEscalation": JSON})
CONTAINER = shaped({"name": JSON, "securityContext": SECURITY_CONTEXT, "ports": st.lists(shaped({
    "hostPort": JSON, "containerPort": JSON})), "livenessProbe": HANDLER, "startupProbe": HANDLER,
    "lifecycle": shaped({"postStart": HANDLER, "preStop": HANDLER})})
SPEC = shaped({"containers": st.lists(CONTAINER, max_size=2), "initContainers": st.lists(CONTAINER, max_size=2),
               "ephemeralContainers": st.lists(CONTAINER, max_size=1), "securityContext": SECURITY_CONTEXT,
               "volumes": st.lists(shaped({"name": JSON, "hostPath": JSON, "nfs": JSON, "emptyDir": JSON})),
               "hostNetwork": JSON, "hostPID": JSON, "hostUsers": JSON, "os": shaped({"name": JSON})})
METADATA = shaped({"annotations": st.dictionaries(st.sampled_from([
    "seccomp.security.alpha.kubernetes.io/pod", "container.apparmor.security.beta.kubernetes.io/a",
    "container.seccomp.security.alpha.kubernetes.io/a", "other"]), JSON)})


@given(metadata=METADATA, spec=SPEC, level=st.sampled_from(["baseline", "restricted", "other"]),
       minor=st.none() | st.integers(0, 40))
def test_any_pod_is_evaluated_without_an_exception(metadata, spec, level, minor):
    results = evaluate_pod(LevelVersion(level, None if minor is None else (1, minor)), metadata, spec)
    assert all(result.forbidden_reason and result.fixes for result in results)
    forbidden_message(LevelVersion(level, None), results)


def test_an_apparmor_annotation_becomes_the_containers_profile_before_admission():
    """The pod strategy's applyAppArmorVersionSkew (what the v1.36 API server answered in
    test_pod_security_api_server.py): "unconfined" in the annotation of a container without a
    profile is that container's profile too, unless the pod's own profile is the same or the pod
    runs Windows."""
    key = "container.apparmor.security.beta.kubernetes.io/app"
    baseline = LevelVersion("baseline", None)

    def detail(**spec: Any) -> str:
        [result] = evaluate_pod(baseline, {"annotations": {key: "unconfined"}}, {"containers": [{"name": "app"}], **spec})
        return result.forbidden_reason + ": " + result.forbidden_detail

    annotation = f'"{key}="unconfined""'
    assert detail() == f'forbidden AppArmor profiles: container "app" and annotation must not set AppArmor profile ' \
                       f'type to "Unconfined", {annotation}'
    assert detail(securityContext={"appArmorProfile": {"type": "Unconfined"}}) == (
        f'forbidden AppArmor profiles: pod and annotation must not set AppArmor profile type to "Unconfined", {annotation}')
    assert detail(os={"name": "windows"}) == (
        f"forbidden AppArmor profile: annotation must not set AppArmor profile type to {annotation}")
    assert detail(containers=[{"name": "app", "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}]) == (
        f"forbidden AppArmor profile: annotation must not set AppArmor profile type to {annotation}")
