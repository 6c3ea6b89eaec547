"""``mpi-settings`` in CEL: ``mpiImplementation`` among those the admin allows,
``launcherCreationPolicy`` AtStartup or WaitForWorkersReady, and ``sshAuthMountPath`` a
non-empty absolute path without ``..``."""
from __future__ import annotations

from policies.vap import cel_text as cel
from policies.vap.checks import Validation, by_message, first, line, param, quoted_choices, quoted_value, when
from policies.vap.job_fields_cel import has_spec_field, spec_field

RULE = "mpi-settings"
LAUNCHER_CREATION_POLICIES = ("AtStartup", "WaitForWorkersReady")
SSH_PATH = "spec.sshAuthMountPath"
SSH_PATH_EXAMPLE = "/home/mpiuser/.ssh"
_FIX = "'; use one of them, or leave it unset for the default'"


def validations() -> list[Validation]:
    return [by_message("implementation", _implementation), by_message("creation", _creation),
            by_message("sshPath", _ssh_path)]


def _not_supported(root: str, field: str, choices: str) -> str:
    value = spec_field(root, field)
    message = f"'supported values: ' + {quoted_choices(choices)} + {_FIX}"
    return when(f"{has_spec_field(root, field)} && !({value} in {choices})",
                line(RULE, cel.string(f"spec.{field}"), "Unsupported value", message, quoted_value(value)))


def _implementation(root: str) -> str:
    return _not_supported(root, "mpiImplementation", param("implementations"))


def _creation(root: str) -> str:
    return _not_supported(root, "launcherCreationPolicy", cel.strings(LAUNCHER_CREATION_POLICIES))


def _ssh_path(root: str) -> str:
    mount = spec_field(root, "sshAuthMountPath")
    path = cel.string(SSH_PATH)
    empty = line(RULE, path, "Required value", cel.string(
        "must not be empty: the operator mounts the SSH keys of the launcher and workers there; set it to the .ssh "
        f"directory of the image's user, e.g. \"{SSH_PATH_EXAMPLE}\", or remove it for the default /root/.ssh"))
    suggestion = f"({mount}.matches('^[A-Za-z0-9]') ? '/' + {mount} : {cel.string(SSH_PATH_EXAMPLE)})"
    relative = line(RULE, path, "Invalid value",
                    "'must be an absolute mount path inside the container (\"~\" and relative paths are not expanded); "
                    f"set it to \"' + {suggestion} + '\", the .ssh directory of the image\\'s user'", quoted_value(mount))
    dots = line(RULE, path, "Invalid value", cel.string(
        "must not contain \"..\" (Kubernetes refuses such mount paths); write the directory directly, e.g. "
        f"\"{SSH_PATH_EXAMPLE}\""), quoted_value(mount))
    return f"({has_spec_field(root, 'sshAuthMountPath')} ? " + first(
        (f"{mount} == ''", empty),
        (f"!{mount}.startsWith('/')", relative),
        (f"{mount}.matches('(^|/)[.][.](/|$)')", dots),
    ) + " : '')"
