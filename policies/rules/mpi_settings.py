"""``mpi-settings``: how the operator wires MPI into the pods.

Owns: ``mpiImplementation`` is one the operator knows (and the admin allows), which decides the
hostfile format and environment it writes; ``launcherCreationPolicy`` is AtStartup or
WaitForWorkersReady (the CRD has no enum for it); ``sshAuthMountPath`` is a non-empty absolute
path without ``..`` (the operator mounts the SSH keys there in every pod). An absent field is
fine: objects converted from older versions arrive without CRD defaults, and the operator
applies the same defaults itself.
"""
from __future__ import annotations

from dataclasses import dataclass

from policies.interface import Action, Finding, Problem, RuleContext
from policies.mpijob.field_value_findings import check_choices, not_supported
from policies.mpijob.reading import spec

MPI_IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")
LAUNCHER_CREATION_POLICIES = ("AtStartup", "WaitForWorkersReady")
SSH_PATH = "spec.sshAuthMountPath"
SSH_PATH_EXAMPLE = "/home/mpiuser/.ssh"


@dataclass(frozen=True)
class MpiSettingsParams:
    # The operator supports these three; an admin may narrow them to the MPIs the cluster's
    # images are validated with (e.g. only OpenMPI and Intel).
    implementations: tuple[str, ...] = MPI_IMPLEMENTATIONS

    def __post_init__(self) -> None:
        check_choices("implementations", self.implementations, MPI_IMPLEMENTATIONS)


class MpiSettings:
    id = "mpi-settings"
    Params = MpiSettingsParams
    default_action = Action.DENY
    needs_cluster = False

    def check(self, ctx: RuleContext) -> list[Finding]:
        params: MpiSettingsParams = ctx.params(self.id)
        fields = spec(ctx.job)
        findings = []
        implementation = fields.get("mpiImplementation")
        if implementation is not None and implementation not in params.implementations:
            findings.append(not_supported(self.id, "spec.mpiImplementation", implementation, params.implementations))
        creation = fields.get("launcherCreationPolicy")
        if creation is not None and creation not in LAUNCHER_CREATION_POLICIES:
            findings.append(not_supported(self.id, "spec.launcherCreationPolicy", creation, LAUNCHER_CREATION_POLICIES))
        mount = fields.get("sshAuthMountPath")
        if mount is not None:
            ssh_path = self._ssh_path(mount)
            if ssh_path is not None:
                findings.append(ssh_path)
        return findings

    def _ssh_path(self, mount: str) -> Finding | None:
        if mount == "":
            return Finding(self.id, SSH_PATH,
                           "must not be empty: the operator mounts the SSH keys of the launcher and workers "
                           f'there; set it to the .ssh directory of the image\'s user, e.g. "{SSH_PATH_EXAMPLE}", '
                           "or remove it for the default /root/.ssh", Problem.REQUIRED)
        if not mount.startswith("/"):
            suggestion = f"/{mount}" if mount[:1].isalnum() else SSH_PATH_EXAMPLE
            return Finding(self.id, SSH_PATH,
                           'must be an absolute mount path inside the container ("~" and relative paths '
                           f'are not expanded); set it to "{suggestion}", the .ssh directory of the image\'s user',
                           Problem.INVALID, mount)
        if ".." in mount.split("/"):
            return Finding(self.id, SSH_PATH,
                           'must not contain ".." (Kubernetes refuses such mount paths); '
                           f'write the directory directly, e.g. "{SSH_PATH_EXAMPLE}"',
                           Problem.INVALID, mount)
        return None
