"""Every check's exact texts: the table-driven cases of upstream's policy/check_*_test.go
(kubernetes/pod-security-admission 8f84a87c), ported case by case. Each case calls the check
revision upstream's test calls (``runAsNonRoot1_35`` is ("runAsNonRoot", 35)) on the pod as written,
without the API server's defaulting, as upstream's unit tests do."""
from __future__ import annotations

from typing import Any

import pytest

from policies.kube.pod_security.check_registry import all_checks
from policies.kube.pod_security.pod_fields import PodView

APPARMOR = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP = "container.seccomp.security.alpha.kubernetes.io/"


def pod(containers: list[dict[str, Any]] | None = None, annotations: dict[str, str] | None = None,
        **spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    if containers is not None:
        spec["containers"] = containers
    return ({"annotations": annotations} if annotations else {}), spec


def c(name: str, **context: Any) -> dict[str, Any]:
    """A container; ``context`` is its securityContext (``sc=None``: none; no keyword: none either)."""
    if "sc" in context:
        return {"name": name, "securityContext": context["sc"]} if context["sc"] is not None else {"name": name}
    return {"name": name, "securityContext": context} if context else {"name": name}


def seccomp(profile_type: str) -> dict[str, Any]:
    return {"seccompProfile": {"type": profile_type}}


def selinux(**options: str) -> dict[str, Any]:
    return {"seLinuxOptions": options}


def sysctls(*names: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return pod(securityContext={"sysctls": [{"name": name, "value": "1"} for name in names]})


def probe(action: str, host: str | None) -> dict[str, Any]:
    return {action: {} if host is None else {"host": host}}


MULTIPLE_CAPABILITIES = [
    c("a", capabilities={"add": ["FOO", "BAR"]}),
    c("b", capabilities={"add": ["BAR", "BAZ"]}),
    c("c", capabilities={"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL", "FOO"]}),
]
RESTRICTED_CAPABILITIES_DETAIL = (
    'containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; '
    'containers "a", "b", "c" must not include "BAR", "BAZ", "CHOWN", "FOO" in securityContext.capabilities.add')
PROC_MOUNTS = [c("a", sc=None), c("b", sc={}), c("c", procMount="Default"), c("d", procMount="Unmasked"),
               c("e", procMount="other")]
SELINUX_CONTAINERS = [c("a", **selinux(type="container_t")), c("b", **selinux(type="container_init_t")),
                      c("c", **selinux(type="container_kvm_t")), c("d", **selinux(type="container_engine_t"))]
SELINUX_BAD_CONTAINERS = [c("e", **selinux(type="bar")), c("f", **selinux(user="bar")), c("g", **selinux(role="baz"))]
SECCOMP_CONTAINERS = [c("a", sc=None), c("b", sc={}), c("c", **seccomp("Unconfined")), c("d", **seccomp("Unconfined")),
                      c("e", **seccomp("RuntimeDefault")), c("f", **seccomp("RuntimeDefault"))]
SECCOMP_FALLTHROUGH = [c("a", sc=None), c("b", sc={}), c("d", **seccomp("RuntimeDefault")),
                       c("e", **seccomp("RuntimeDefault"))]
MUST_SET_SECCOMP = 'must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
NEW_SYSCTLS = {27: ["net.ipv4.ip_local_reserved_ports"],
               29: ["net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                    "net.ipv4.tcp_keepalive_probes"],
               32: ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"],
               37: ["net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"]}

# (case name, check ID, the revision's version (minor), (metadata, spec), reason, detail); reason None: allowed
CASES: list[tuple[str, str, int, tuple[dict[str, Any], dict[str, Any]], str | None, str]] = [
    # check_allowPrivilegeEscalation_test.go
    *[(f"{minor}: multiple containers", "allowPrivilegeEscalation", minor,
       pod([c("a"), c("b", allowPrivilegeEscalation=None), c("c", allowPrivilegeEscalation=True),
            c("d", allowPrivilegeEscalation=False)]),
       "allowPrivilegeEscalation != false",
       'containers "a", "b", "c" must set securityContext.allowPrivilegeEscalation=false') for minor in (8, 25)],
    ("windows pod, admit without checking privilegeEscalation", "allowPrivilegeEscalation", 25,
     pod([c("a")], os={"name": "windows"}), None, ""),
    ("linux pod, reject if security context is not set", "allowPrivilegeEscalation", 25,
     pod([c("a")], os={"name": "linux"}), "allowPrivilegeEscalation != false",
     'container "a" must set securityContext.allowPrivilegeEscalation=false'),
    # check_appArmorProfile_test.go
    ("container with default AppArmor + extra annotations", "appArmorProfile", 0,
     pod(annotations={APPARMOR + "test": "runtime/default", "env": "prod"}), None, ""),
    ("container with local AppArmor + extra annotations", "appArmorProfile", 0,
     pod(annotations={APPARMOR + "test": "localhost/sec-profile01", "env": "dev"}), None, ""),
    ("container with no AppArmor annotations", "appArmorProfile", 0, pod(annotations={"env": "dev"}), None, ""),
    ("container with no annotations", "appArmorProfile", 0, pod(), None, ""),
    ("pod with runtime default", "appArmorProfile", 0,
     pod(securityContext={"appArmorProfile": {"type": "RuntimeDefault"}}), None, ""),
    ("container with localhost profile", "appArmorProfile", 0,
     pod([c("foo", appArmorProfile={"type": "RuntimeDefault"})]), None, ""),
    ("unconfined pod", "appArmorProfile", 0, pod(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
     "forbidden AppArmor profile", 'pod must not set AppArmor profile type to "Unconfined"'),
    ("unconfined container", "appArmorProfile", 0,
     pod([c("foo", appArmorProfile={"type": "Unconfined"})],
         securityContext={"appArmorProfile": {"type": "RuntimeDefault"}}),
     "forbidden AppArmor profile", 'container "foo" must not set AppArmor profile type to "Unconfined"'),
    ("unconfined init container", "appArmorProfile", 0,
     pod([c("foo")], initContainers=[c("bar", appArmorProfile={"type": "Unconfined"})],
         securityContext={"appArmorProfile": {"type": "RuntimeDefault"}}),
     "forbidden AppArmor profile", 'container "bar" must not set AppArmor profile type to "Unconfined"'),
    ("multiple containers", "appArmorProfile", 0,
     pod(annotations={APPARMOR: "bogus", APPARMOR + "a": "", APPARMOR + "b": "runtime/default",
                      APPARMOR + "c": "localhost/", APPARMOR + "d": "localhost/foo", APPARMOR + "e": "unconfined",
                      APPARMOR + "f": "unknown"}),
     "forbidden AppArmor profiles",
     "annotations must not set AppArmor profile type to "
     f'"{APPARMOR}="bogus"", "{APPARMOR}e="unconfined"", "{APPARMOR}f="unknown""'),
    # check_capabilities_baseline_test.go
    ("multiple containers", "capabilities_baseline", 0,
     pod([c("a", capabilities={"add": ["FOO", "BAR"]}), c("b", capabilities={"add": ["BAR", "BAZ"]})]),
     "non-default capabilities",
     'containers "a", "b" must not include "BAR", "BAZ", "FOO" in securityContext.capabilities.add'),
    # check_capabilities_restricted_test.go
    *[(f"{minor}: multiple containers", "capabilities_restricted", minor, pod(MULTIPLE_CAPABILITIES),
       "unrestricted capabilities", RESTRICTED_CAPABILITIES_DETAIL) for minor in (22, 25)],
    ("windows pod, admit without checking capabilities", "capabilities_restricted", 25,
     pod([c("a")], os={"name": "windows"}), None, ""),
    ("linux pod, reject if security context is not set", "capabilities_restricted", 25,
     pod([c("a")], os={"name": "linux"}), "unrestricted capabilities",
     'container "a" must set securityContext.capabilities.drop=["ALL"]'),
    # check_hostNamespaces_test.go
    ("multiple host namespaces", "hostNamespaces", 0, pod(hostNetwork=True, hostIPC=True, hostPID=True),
     "host namespaces", "hostNetwork=true, hostPID=true, hostIPC=true"),
    # check_hostPathVolumes_test.go
    ("host path volumes", "hostPathVolumes", 0,
     pod(volumes=[{"name": "a", "hostPath": {}}, {"name": "b", "hostPath": {}}, {"name": "c", "emptyDir": {}}]),
     "hostPath volumes", 'volumes "a", "b"'),
    # check_hostPorts_test.go
    ("one container, one host port", "hostPorts", 0,
     pod([{"name": "a", "ports": [{"hostPort": 0}]}, {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 20}]}]),
     "hostPort", 'container "b" uses hostPort 20'),
    ("multiple containers, multiple host port", "hostPorts", 0,
     pod([{"name": "a", "ports": [{"hostPort": 0}]},
          {"name": "b", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 20}]},
          {"name": "c", "ports": [{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 30}]}]),
     "hostPort", 'containers "b", "c" use hostPorts 10, 20, 30'),
    # check_hostProbesAndhostLifecycle_test.go
    ("valid pod with unset hosts", "hostProbesAndHostLifecycle", 34,
     pod([{"name": "a", "livenessProbe": probe("httpGet", None), "readinessProbe": probe("tcpSocket", None),
           "lifecycle": {"postStart": probe("httpGet", None)}}]), None, ""),
    ("invalid pod with local host IP as probe host", "hostProbesAndHostLifecycle", 34,
     pod([{"name": "a", "livenessProbe": probe("httpGet", "127.0.0.1"), "readinessProbe": probe("tcpSocket", "::1"),
           "startupProbe": probe("httpGet", "localhost")}]),
     "probe or lifecycle host", 'container "a" uses probe or lifecycle hosts "127.0.0.1", "::1", "localhost"'),
    ("invalid httpget host in liveness probe", "hostProbesAndHostLifecycle", 34,
     pod([{"name": "a", "livenessProbe": probe("httpGet", "invalid.host")}]),
     "probe or lifecycle host", 'container "a" uses probe or lifecycle host "invalid.host"'),
    ("invalid tcpsocket host in readiness probe", "hostProbesAndHostLifecycle", 34,
     pod([{"name": "b", "readinessProbe": probe("tcpSocket", "invalid.host")}]),
     "probe or lifecycle host", 'container "b" uses probe or lifecycle host "invalid.host"'),
    ("invalid httpget host in startup probe", "hostProbesAndHostLifecycle", 34,
     pod([{"name": "c", "startupProbe": probe("httpGet", "invalid.host")}]),
     "probe or lifecycle host", 'container "c" uses probe or lifecycle host "invalid.host"'),
    ("invalid poststart tcpsocket host", "hostProbesAndHostLifecycle", 34,
     pod([{"name": "d", "lifecycle": {"postStart": probe("tcpSocket", "invalid.host")}}]),
     "probe or lifecycle host", 'container "d" uses probe or lifecycle host "invalid.host"'),
    ("invalid prestop httpget host", "hostProbesAndHostLifecycle", 34,
     pod([{"name": "e", "lifecycle": {"preStop": probe("httpGet", "another.invalid.host")}}]),
     "probe or lifecycle host", 'container "e" uses probe or lifecycle host "another.invalid.host"'),
    ("multiple containers with multiple invalid hosts", "hostProbesAndHostLifecycle", 34,
     pod([{"name": "valid"}, {"name": "invalid1", "livenessProbe": probe("httpGet", "a.com")},
          {"name": "invalid2", "lifecycle": {"preStop": probe("tcpSocket", "b.com")},
           "startupProbe": probe("httpGet", "a.com")}]),
     "probe or lifecycle host", 'containers "invalid1", "invalid2" use probe or lifecycle hosts "a.com", "b.com"'),
    ("invalid ipv4 host in probe", "hostProbesAndHostLifecycle", 34,
     pod([{"name": "a", "livenessProbe": probe("httpGet", "8.8.8.8")}]),
     "probe or lifecycle host", 'container "a" uses probe or lifecycle host "8.8.8.8"'),
    ("invalid ipv6 host in probe", "hostProbesAndHostLifecycle", 34,
     pod([{"name": "a", "livenessProbe": probe("tcpSocket", "2001:4860:4860::8888")}]),
     "probe or lifecycle host", 'container "a" uses probe or lifecycle host "2001:4860:4860::8888"'),
    ("invalid host in initcontainer", "hostProbesAndHostLifecycle", 34,
     pod(initContainers=[{"name": "init", "livenessProbe": probe("httpGet", "invalid.init.host")}]),
     "probe or lifecycle host", 'container "init" uses probe or lifecycle host "invalid.init.host"'),
    # check_privileged_test.go
    ("privileged", "privileged", 0,
     pod([c("a", sc=None), c("b", sc={}), c("c", privileged=False), c("d", privileged=True),
          c("e", privileged=True)]),
     "privileged", 'containers "d", "e" must not set securityContext.privileged=true'),
    # check_procMount_baseline_test.go
    ("procMount", "procMount", 35, pod(PROC_MOUNTS, hostUsers=True),
     "procMount", 'containers "d", "e" must not set securityContext.procMount to "Unmasked", "other"'),
    ("procMount with userns", "procMount", 35, pod(PROC_MOUNTS, hostUsers=False), None, ""),
    # check_procMount_restricted_test.go (procMount_1_0, which 1.35's restricted check runs, with either hostUsers)
    *[(f"procMount, hostUsers={userns}", check_id, minor, pod(PROC_MOUNTS, hostUsers=userns),
       "procMount", 'containers "d", "e" must not set securityContext.procMount to "Unmasked", "other"')
      for userns in (True, False) for check_id, minor in (("procMount", 0), ("procMount_restricted", 35))],
    # check_restrictedVolumes_test.go
    ("host path volumes", "restrictedVolumes", 0,
     pod(volumes=[
         *[{"name": f"a{i}", source: {}} for i, source in enumerate(
             ["emptyDir", "secret", "persistentVolumeClaim", "downwardAPI", "configMap", "projected", "csi",
              "ephemeral", "image"], start=1)],
         *[{"name": f"b{i}", source: {}} for i, source in enumerate(
             ["hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs", "iscsi", "glusterfs", "rbd",
              "flexVolume", "cinder", "cephfs", "flocker", "fc", "azureFile", "vsphereVolume", "quobyte", "azureDisk",
              "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos"], start=1)],
         {"name": "c1"}]),
     "restricted volume types",
     'volumes "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9", "b10", "b11", "b12", "b13", "b14", "b15", "b16", '
     '"b17", "b18", "b19", "b20", "b21", "c1" use restricted volume types "awsElasticBlockStore", "azureDisk", '
     '"azureFile", "cephfs", "cinder", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", '
     '"hostPath", "iscsi", "nfs", "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", '
     '"unknown", "vsphereVolume"'),
    # check_runAsNonRoot_test.go
    ("no explicit runAsNonRoot", "runAsNonRoot", 35, pod([c("a")]),
     "runAsNonRoot != true", 'pod or container "a" must set securityContext.runAsNonRoot=true'),
    ("pod runAsNonRoot=false", "runAsNonRoot", 35, pod([c("a", sc=None)], securityContext={"runAsNonRoot": False}),
     "runAsNonRoot != true", "pod must not set securityContext.runAsNonRoot=false"),
    ("containers runAsNonRoot=false", "runAsNonRoot", 35,
     pod([c("a", sc=None), c("b", sc={}), c("c", runAsNonRoot=False), c("d", runAsNonRoot=False),
          c("e", runAsNonRoot=True), c("f", runAsNonRoot=True)], securityContext={"runAsNonRoot": True}),
     "runAsNonRoot != true", 'containers "c", "d" must not set securityContext.runAsNonRoot=false'),
    ("pod nil, container fallthrough", "runAsNonRoot", 35,
     pod([c("a", sc=None), c("b", sc={}), c("d", runAsNonRoot=True), c("e", runAsNonRoot=True)]),
     "runAsNonRoot != true", 'pod or containers "a", "b" must set securityContext.runAsNonRoot=true'),
    ("host users false allowed", "runAsNonRoot", 35, pod(hostUsers=False), None, ""),
    # check_runAsUser_test.go
    ("pod runAsUser=0", "runAsUser", 35, pod([c("a", sc=None)], securityContext={"runAsUser": 0}),
     "runAsUser=0", "pod must not set runAsUser=0"),
    ("pod runAsUser=non-zero", "runAsUser", 35, pod([c("a", sc=None)], securityContext={"runAsUser": 1000}),
     None, ""),
    ("pod runAsUser=nil", "runAsUser", 35, pod([c("a", sc=None)], securityContext={"runAsUser": None}), None, ""),
    ("containers runAsUser=0", "runAsUser", 35,
     pod([c("a", sc=None), c("b", sc={}), c("c", runAsUser=0), c("d", runAsUser=0), c("e", runAsUser=1),
          c("f", runAsUser=1)], securityContext={"runAsUser": 1000}),
     "runAsUser=0", 'containers "c", "d" must not set runAsUser=0'),
    ("containers runAsUser=non-zero", "runAsUser", 35,
     pod([c("c", runAsUser=1), c("d", runAsUser=2), c("e", runAsUser=3), c("f", runAsUser=4)]), None, ""),
    ("host users false allowed", "runAsUser", 35, pod(hostUsers=False), None, ""),
    # check_seLinuxOptions_test.go
    ("invalid pod and containers", "seLinuxOptions", 31,
     pod(SELINUX_CONTAINERS + SELINUX_BAD_CONTAINERS, securityContext=selinux(type="foo", user="bar", role="baz")),
     "seLinuxOptions", 'pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: '
     'types "bar", "foo"; user may not be set; role may not be set'),
    ("invalid pod", "seLinuxOptions", 31,
     pod(SELINUX_CONTAINERS, securityContext=selinux(type="foo", user="bar", role="baz")),
     "seLinuxOptions", 'pod set forbidden securityContext.seLinuxOptions: type "foo"; user may not be set; '
     "role may not be set"),
    ("invalid containers", "seLinuxOptions", 31,
     pod(SELINUX_CONTAINERS + SELINUX_BAD_CONTAINERS, securityContext=selinux()),
     "seLinuxOptions", 'containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: type "bar"; '
     "user may not be set; role may not be set"),
    ("bad type", "seLinuxOptions", 31, pod(securityContext=selinux(type="bad")),
     "seLinuxOptions", 'pod set forbidden securityContext.seLinuxOptions: type "bad"'),
    ("bad user", "seLinuxOptions", 31, pod(securityContext=selinux(user="bad")),
     "seLinuxOptions", "pod set forbidden securityContext.seLinuxOptions: user may not be set"),
    ("bad role", "seLinuxOptions", 31, pod(securityContext=selinux(role="bad")),
     "seLinuxOptions", "pod set forbidden securityContext.seLinuxOptions: role may not be set"),
    # check_seccompProfile_baseline_test.go
    ("pod seccomp invalid", "seccompProfile_baseline", 0,
     pod(annotations={"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}),
     "seccompProfile", 'forbidden annotation seccomp.security.alpha.kubernetes.io/pod="unconfined"'),
    ("containers seccomp invalid", "seccompProfile_baseline", 0,
     pod([c("a"), c("b"), c("c")], annotations={SECCOMP + "a": "unconfined", SECCOMP + "b": "unknown"}),
     "seccompProfile", f'forbidden annotations {SECCOMP}a="unconfined", {SECCOMP}b="unknown"'),
    ("pod and containers seccomp invalid", "seccompProfile_baseline", 0,
     pod([c("a"), c("b"), c("c")], annotations={"seccomp.security.alpha.kubernetes.io/pod": "unconfined",
                                               SECCOMP + "a": "unconfined", SECCOMP + "b": "unknown"}),
     "seccompProfile", f'forbidden annotations {SECCOMP}a="unconfined", {SECCOMP}b="unknown", '
     'seccomp.security.alpha.kubernetes.io/pod="unconfined"'),
    ("pod seccomp invalid", "seccompProfile_baseline", 19, pod([c("a", sc=None)], securityContext=seccomp("Unconfined")),
     "seccompProfile", 'pod must not set securityContext.seccompProfile.type to "Unconfined"'),
    ("containers seccomp invalid", "seccompProfile_baseline", 19,
     pod(SECCOMP_CONTAINERS, securityContext=seccomp("RuntimeDefault")),
     "seccompProfile", 'containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined"'),
    ("pod and containers seccomp invalid", "seccompProfile_baseline", 19,
     pod(SECCOMP_CONTAINERS, securityContext=seccomp("Unconfined")),
     "seccompProfile", 'pod and containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined"'),
    # check_seccompProfile_restricted_test.go
    *[case for minor in (19, 25) for case in [
        (f"{minor}: no explicit seccomp", "seccompProfile_restricted", minor, pod([c("a")]),
         "seccompProfile", f'pod or container "a" {MUST_SET_SECCOMP}'),
        (f"{minor}: pod seccomp invalid", "seccompProfile_restricted", minor,
         pod([c("a", sc=None)], securityContext=seccomp("Unconfined")),
         "seccompProfile", 'pod must not set securityContext.seccompProfile.type to "Unconfined"'),
        (f"{minor}: containers seccomp invalid", "seccompProfile_restricted", minor,
         pod(SECCOMP_CONTAINERS, securityContext=seccomp("RuntimeDefault")),
         "seccompProfile", 'containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined"'),
        (f"{minor}: pod nil, container fallthrough", "seccompProfile_restricted", minor, pod(SECCOMP_FALLTHROUGH),
         "seccompProfile", f'pod or containers "a", "b" {MUST_SET_SECCOMP}'),
    ]],
    ("no explicit seccomp, windows Pod", "seccompProfile_restricted", 25, pod([c("a")], os={"name": "windows"}),
     None, ""),
    ("no explicit seccomp, linux pod", "seccompProfile_restricted", 25, pod([c("a")], os={"name": "linux"}),
     "seccompProfile", f'pod or container "a" {MUST_SET_SECCOMP}'),
    # check_sysctls_test.go: every revision forbids unknown sysctls, and allows each one from its version on
    *[(f"{minor}: forbidden sysctls", "sysctls", minor, sysctls("a", "b"), "forbidden sysctls", "a, b")
      for minor in (0, 27, 29, 32, 37)],
    *[(f"{minor}: {name}", "sysctls", minor, sysctls(name), None if minor >= since else "forbidden sysctls",
       "" if minor >= since else name)
      for since, names in NEW_SYSCTLS.items() for name in names for minor in (0, 27, 29, 32, 37)],
    # check_windowsHostProcess_test.go
    ("host process", "windowsHostProcess", 0,
     pod([c("a", sc=None), c("b", sc={}), c("c", windowsOptions={}), c("d", windowsOptions={"hostProcess": False}),
          c("e", windowsOptions={"hostProcess": True}), c("f", windowsOptions={"hostProcess": True})],
         securityContext={"windowsOptions": {"hostProcess": True}}),
     "hostProcess", 'pod and containers "e", "f" must not set securityContext.windowsOptions.hostProcess=true'),
]


def revision(check_id: str, minor: int):
    """The revision of a check that applies at policy version 1.minor."""
    check = next(check for check in all_checks() if check.check_id == check_id)
    return [r for r in check.versions if r.minimum_version <= (1, minor)][-1].check_pod


@pytest.mark.parametrize(("check_id", "minor", "pod_fields", "reason", "detail"),
                         [case[1:] for case in CASES], ids=[f"{case[1]}: {case[0]}" for case in CASES])
def test_the_check_reports_upstreams_texts(check_id, minor, pod_fields, reason, detail):
    metadata, spec = pod_fields
    result = revision(check_id, minor)(PodView(metadata, spec, pod_defaults=False))
    if reason is None:
        assert result is None
    else:
        assert result is not None
        assert (result.check_id, result.forbidden_reason, result.forbidden_detail) == (check_id, reason, detail)
        assert result.fixes, "every failure names at least one place to fix"


def test_each_check_revision_starts_at_upstreams_version():
    """The version boundaries of policy/check_*.go, and which baseline checks each restricted one replaces."""
    assert {check.check_id: (check.level, [(r.minimum_version[1], r.overrides) for r in check.versions])
            for check in all_checks()} == {
        "allowPrivilegeEscalation": ("restricted", [(8, ()), (25, ())]),
        "appArmorProfile": ("baseline", [(0, ())]),
        "capabilities_baseline": ("baseline", [(0, ())]),
        "capabilities_restricted": ("restricted", [(22, ("capabilities_baseline",)), (25, ("capabilities_baseline",))]),
        "hostNamespaces": ("baseline", [(0, ())]),
        "hostPathVolumes": ("baseline", [(0, ())]),
        "hostPorts": ("baseline", [(0, ())]),
        "hostProbesAndHostLifecycle": ("baseline", [(34, ())]),
        "privileged": ("baseline", [(0, ())]),
        "procMount": ("baseline", [(0, ()), (35, ())]),
        "procMount_restricted": ("restricted", [(35, ("procMount",))]),
        "restrictedVolumes": ("restricted", [(0, ("hostPathVolumes",))]),
        "runAsNonRoot": ("restricted", [(0, ()), (35, ())]),
        "runAsUser": ("restricted", [(23, ()), (35, ())]),
        "seLinuxOptions": ("baseline", [(0, ()), (31, ())]),
        "seccompProfile_baseline": ("baseline", [(0, ()), (19, ())]),
        "seccompProfile_restricted": ("restricted", [(19, ("seccompProfile_baseline",)),
                                                     (25, ("seccompProfile_baseline",))]),
        "sysctls": ("baseline", [(0, ()), (27, ()), (29, ()), (32, ()), (37, ())]),
        "windowsHostProcess": ("baseline", [(0, ())]),
    }
