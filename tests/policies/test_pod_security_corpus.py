"""Upstream's PodSecurity fixtures (tests/data/pod-security): every pod, at its level and version,
gets the verdict upstream's own tests expect of the API server: a ``fail`` pod fails, naming the
check it was made for (or the restricted check that replaces it), with the text upstream's test
looks for; a ``pass`` pod passes. The fixes of every failure point at the pod's own fields."""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import pytest

from policies.kube.pod_security import CheckResult, LevelVersion, evaluate_pod, forbidden_message
from policies.kube.pod_security.check_registry import all_checks
from testing.reference_data import PodSecurityFixture, pod_security_fixtures

FIXTURES = pod_security_fixtures()
BY_LEVEL_VERSION: dict[tuple[str, tuple[int, int]], list[PodSecurityFixture]] = defaultdict(list)
for _fixture in FIXTURES:
    BY_LEVEL_VERSION[(_fixture.level, _fixture.version)].append(_fixture)
NEWEST = max(version for _, version in BY_LEVEL_VERSION)
CHECK_IDS = {check.check_id.lower(): check.check_id for check in all_checks()}

# The text upstream's test looks for in the API server's error (expectErrorSubstring of
# test/fixtures_*.go; the check ID where a generator sets none).
EXPECTED_TEXT = {
    "allowPrivilegeEscalation": "allowPrivilegeEscalation", "appArmorProfile": "forbidden AppArmor profile",
    "capabilities_baseline": "capabilities", "capabilities_restricted": "unrestricted capabilities",
    "hostNamespaces": "host namespaces", "hostPathVolumes": "hostPath", "hostPorts": "hostPort",
    "hostProbesAndHostLifecycle": "probe or lifecycle host", "privileged": "privileged", "procMount": "procMount",
    "procMount_restricted": "procMount", "restrictedVolumes": "restricted volume types",
    "runAsNonRoot": "runAsNonRoot", "runAsUser": "runAsUser", "seLinuxOptions": "seLinuxOptions",
    "seccompProfile_baseline": "seccompProfile", "seccompProfile_restricted": "seccompProfile",
    "sysctls": "forbidden sysctl", "windowsHostProcess": "hostProcess",
}
# A baseline check's fixtures at the restricted level, from the version the restricted check that
# replaces it starts at (policy/check_*.go's OverrideCheckIDs).
REPLACED_AT_RESTRICTED = {
    "capabilities_baseline": ("capabilities_restricted", 22),
    "seccompProfile_baseline": ("seccompProfile_restricted", 19),
    "hostPathVolumes": ("restrictedVolumes", 0),
    "procMount": ("procMount_restricted", 35),
}


def expected_check(fixture: PodSecurityFixture) -> str:
    check_id = CHECK_IDS[fixture.check_name]
    if fixture.level == "restricted" and check_id in REPLACED_AT_RESTRICTED:
        replacement, since = REPLACED_AT_RESTRICTED[check_id]
        if fixture.version[1] >= since:
            return replacement
    return check_id


def evaluate(fixture: PodSecurityFixture, version: tuple[int, int] | None, **options: Any) -> list[CheckResult]:
    return evaluate_pod(LevelVersion(fixture.level, version), fixture.pod.get("metadata") or {},
                        fixture.pod.get("spec") or {}, **options)


def wrong_verdicts(fixtures: list[PodSecurityFixture], version: tuple[int, int] | None = None,
                   **options: Any) -> list[str]:
    """What differs from upstream's expectation, one line per fixture; empty when all agree."""
    wrong = []
    for fixture in fixtures:
        results = evaluate(fixture, fixture.version if version is None else version, **options)
        checks = [result.check_id for result in results]
        if fixture.verdict == "pass":
            if results:
                wrong.append(f"{fixture}: fails {checks}")
            continue
        expected = expected_check(fixture) if not fixture.name.startswith("base") else None
        message = forbidden_message(LevelVersion(fixture.level, fixture.version), results)
        if not results:
            wrong.append(f"{fixture}: passes")
        elif expected not in checks:
            wrong.append(f"{fixture}: fails {checks}, not {expected}")
        elif EXPECTED_TEXT[expected] not in message:
            wrong.append(f"{fixture}: {message!r} lacks {EXPECTED_TEXT[expected]!r}")
    return wrong


def test_the_corpus_is_upstreams_whole_set():
    assert len(FIXTURES) == 4537
    assert sorted(BY_LEVEL_VERSION) == [(level, (1, minor)) for level in ("baseline", "restricted")
                                        for minor in range(NEWEST[1] + 1)]
    assert NEWEST == (1, 37)
    assert {f.check_name for f in FIXTURES if not f.name.startswith("base")} == set(CHECK_IDS)
    assert sum(f.verdict == "fail" for f in FIXTURES) == 3486


@pytest.mark.parametrize(("level", "version"), sorted(BY_LEVEL_VERSION),
                         ids=[f"{level}-v1.{minor}" for level, (_, minor) in sorted(BY_LEVEL_VERSION)])
def test_every_fixture_gets_upstreams_verdict(level, version):
    assert wrong_verdicts(BY_LEVEL_VERSION[(level, version)]) == []


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_latest_and_any_newer_version_are_the_newest(level):
    newest = BY_LEVEL_VERSION[(level, NEWEST)]
    assert wrong_verdicts(newest, version=None) == []
    assert wrong_verdicts(newest, version=(1, 10000)) == []


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_an_api_server_of_an_older_version_knows_no_newer_policy(level):
    """Upstream's emulation version: an API server at 1.36 evaluates "latest" (and v1.37) as v1.36,
    so the sysctls v1.37 allows are still forbidden there."""
    v1_36 = BY_LEVEL_VERSION[(level, (1, 36))]
    assert wrong_verdicts(v1_36, version=None, emulation_version=(1, 36)) == []
    assert wrong_verdicts(v1_36, version=(1, 37), emulation_version=(1, 36)) == []
    newly_safe = [f for f in BY_LEVEL_VERSION[(level, NEWEST)] if f.verdict == "pass" and f.check_name == "sysctls"]
    assert [f.name for f in newly_safe if evaluate(f, None, emulation_version=(1, 36))] == ["sysctls1"]


def test_the_baseline_of_1_36_lets_a_newer_sysctl_fail_that_1_37_allows():
    fixture = next(f for f in BY_LEVEL_VERSION[("baseline", NEWEST)] if f.name == "sysctls1")
    assert [r.forbidden_detail for r in evaluate(fixture, (1, 36))] == [
        "net.ipv4.tcp_slow_start_after_idle, net.ipv4.tcp_notsent_lowat"]
    assert evaluate(fixture, (1, 37)) == []


# A fix's field: names and [index] or [annotation key] steps, from the pod's root.
_STEP = re.compile(r"\.?([^.\[\]]+)|\[([^\]]*)\]")


def resolve(document: Any, path: str) -> tuple[list[Any], bool]:
    """The values along ``path`` (the pod first), and whether the whole path exists."""
    values = [document]
    for name, key in _STEP.findall(path):
        current = values[-1]
        if name and isinstance(current, dict) and name in current:
            values.append(current[name])
        elif key and key.isdigit() and isinstance(current, list) and int(key) < len(current):
            values.append(current[int(key)])
        elif key and isinstance(current, dict) and key in current:
            values.append(current[key])
        else:
            return values, False
    return values, True


def misplaced_fixes(fixture: PodSecurityFixture) -> list[str]:
    problems = []
    for result in evaluate(fixture, fixture.version):
        for fix in result.fixes:
            values, exists = resolve(fixture.pod, fix.field)
            container_path = re.match(r"spec\.(initContainers|containers|ephemeralContainers)\[(\d+)\]", fix.field)
            if container_path:
                container = fixture.pod["spec"][container_path[1]][int(container_path[2])]
                if container.get("name") != fix.container:
                    problems.append(f"{fix.field} is not in container {fix.container}")
            if not exists and not (container_path and fix.field.split(".")[-1] in (
                    "allowPrivilegeEscalation", "drop", "runAsNonRoot", "type")):
                problems.append(f"{fix.field} (only {len(values) - 1} steps exist)")
            if not (fix.allowed and fix.write):
                problems.append(f"{fix.field}: no allowed or write text")
    return problems


def test_every_fix_points_at_a_field_of_the_pod():
    """A fix names a field that exists, or (where the pod must add it) a field of a container that
    exists and has that name."""
    failing = [f for f in FIXTURES if f.verdict == "fail"]
    assert {str(f): problems for f in failing if (problems := misplaced_fixes(f))} == {}
