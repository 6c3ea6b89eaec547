"""Every check, and which of them run at each level and policy version, as upstream's registry
(``policy/registry.go``) arranges them: a check's revision applies from its minimum version to the
next revision's; restricted runs every baseline check a restricted one does not override; results
come baseline checks first, then restricted ones, each group ordered by check ID. The tables are
built once (per emulated API server version), never per pod."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any, NamedTuple

from policies.kube.pod_security.check_results import CheckResult
from policies.kube.pod_security.level_versions import BASELINE, PRIVILEGED, RESTRICTED, LevelVersion
from policies.kube.pod_security.pod_fields import PodView

Version = tuple[int, int]
CheckPod = Callable[[PodView], "CheckResult | None"]   # None: the pod passes


class VersionedCheck(NamedTuple):
    minimum_version: Version            # the first policy version this revision applies to
    check_pod: CheckPod
    overrides: tuple[str, ...] = ()     # baseline check IDs this restricted revision replaces


class Check(NamedTuple):
    check_id: str
    level: str                          # BASELINE or RESTRICTED
    versions: tuple[VersionedCheck, ...]


def all_checks() -> tuple[Check, ...]:
    # Imported here: every check module imports this one for Check and VersionedCheck.
    from policies.kube.pod_security import (
        check_allow_privilege_escalation, check_app_armor_profile, check_capabilities, check_host_namespaces,
        check_host_ports, check_host_probes_and_host_lifecycle, check_privileged, check_proc_mount, check_run_as,
        check_se_linux_options, check_seccomp_profile, check_sysctls, check_volume_types,
        check_windows_host_process)
    return (
        check_allow_privilege_escalation.CHECK,
        check_app_armor_profile.CHECK,
        check_capabilities.BASELINE_CHECK,
        check_capabilities.RESTRICTED_CHECK,
        check_host_namespaces.CHECK,
        check_volume_types.HOST_PATH_CHECK,
        check_host_ports.CHECK,
        check_host_probes_and_host_lifecycle.CHECK,
        check_privileged.CHECK,
        check_proc_mount.BASELINE_CHECK,
        check_proc_mount.RESTRICTED_CHECK,
        check_volume_types.RESTRICTED_CHECK,
        check_run_as.RUN_AS_NON_ROOT_CHECK,
        check_run_as.RUN_AS_USER_CHECK,
        check_se_linux_options.CHECK,
        check_seccomp_profile.BASELINE_CHECK,
        check_seccomp_profile.RESTRICTED_CHECK,
        check_sysctls.CHECK,
        check_windows_host_process.CHECK,
    )


class CheckTables(NamedTuple):
    """The checks of each level at each policy version, in the order they report."""
    newest: Version                                     # what "latest", and any newer version, stands for
    baseline: Mapping[Version, tuple[CheckPod, ...]]
    restricted: Mapping[Version, tuple[CheckPod, ...]]

    def checks_for(self, level_version: LevelVersion) -> Sequence[CheckPod]:
        """The checks a pod must pass at this level and version; none for privileged (and, as
        upstream, the restricted ones for a level it does not know)."""
        if level_version.level == PRIVILEGED:
            return ()
        version = level_version.version
        if version is None or self.newest < version:
            version = self.newest
        table = self.baseline if level_version.level == BASELINE else self.restricted
        return table.get(version, ())


def _revisions_by_version(check: Check, newest: Version) -> dict[Version, VersionedCheck]:
    revisions: dict[Version, VersionedCheck] = {}
    for index, revision in enumerate(check.versions):
        until = check.versions[index + 1].minimum_version[1] if index + 1 < len(check.versions) else newest[1] + 1
        for minor in range(revision.minimum_version[1], until):
            revisions[(1, minor)] = revision
    return revisions


def build_tables(checks: Sequence[Check], emulation_version: Version | None = None) -> CheckTables:
    """Upstream's NewEvaluator: the newest version is the newest any check starts at, lowered to
    the emulated version (the API server's own) when that is older."""
    newest = max((check.versions[-1].minimum_version for check in checks), default=(0, 0))
    if emulation_version is not None and emulation_version < newest:
        newest = emulation_version
    revisions = {check.check_id: _revisions_by_version(check, newest) for check in checks}
    levels = {check.check_id: check.level for check in checks}
    order = (sorted(check_id for check_id, level in levels.items() if level == BASELINE)
             + sorted(check_id for check_id, level in levels.items() if level == RESTRICTED))
    baseline: dict[Version, tuple[CheckPod, ...]] = {}
    restricted: dict[Version, tuple[CheckPod, ...]] = {}
    for minor in range(0, newest[1] + 1 if newest[0] == 1 else 0):
        version = (1, minor)
        present = {check_id: by_version[version] for check_id, by_version in revisions.items()
                   if version in by_version}
        overridden = {override for check_id, revision in present.items() if levels[check_id] == RESTRICTED
                      for override in revision.overrides}
        baseline[version] = tuple(present[check_id].check_pod for check_id in order
                                  if check_id in present and levels[check_id] == BASELINE)
        restricted[version] = tuple(present[check_id].check_pod for check_id in order
                                    if check_id in present and check_id not in overridden)
    return CheckTables(newest, baseline, restricted)


@cache
def check_tables(emulation_version: Version | None = None) -> CheckTables:
    """Every upstream check's tables, built once per emulated version."""
    return build_tables(all_checks(), emulation_version)


def newest_policy_version(emulation_version: Version | None = None) -> Version:
    """The version ``latest`` (and any newer version) stands for."""
    return check_tables(emulation_version).newest


def evaluate_pod(level_version: LevelVersion, pod_metadata: Mapping[str, Any], pod_spec: Mapping[str, Any],
                 *, emulation_version: Version | None = None) -> list[CheckResult]:
    """The checks this pod fails at this level and version, in upstream's order; [] for privileged.

    ``emulation_version`` is upstream's: the API server's own version (``(1, 36)``), past which it
    knows no policy version; None for every check upstream has."""
    checks = check_tables(emulation_version).checks_for(level_version)
    if not checks:
        return []
    pod = PodView(pod_metadata, pod_spec)
    return [result for check in checks if (result := check(pod)) is not None]
