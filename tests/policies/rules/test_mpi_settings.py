import pytest

from policies.interface import Problem
from policies.rules.mpi_settings import MpiSettings, MpiSettingsParams
from policies.registry import default_settings
from testing.builders import context, mpijob

RULE = MpiSettings()


@pytest.mark.parametrize("fields", [
    {"mpiImplementation": "OpenMPI"}, {"mpiImplementation": "Intel"}, {"mpiImplementation": "MPICH"},
    {"launcherCreationPolicy": "AtStartup"}, {"launcherCreationPolicy": "WaitForWorkersReady"},
    {"sshAuthMountPath": "/root/.ssh"}, {"sshAuthMountPath": "/home/mpiuser/.ssh"},
], ids=["openmpi", "intel", "mpich", "at-startup", "wait", "root-ssh", "user-ssh"])
def test_supported_settings_are_clean(fields):
    assert list(RULE.check(context(mpijob(**fields)))) == []


def test_absent_fields_are_fine_because_defaults_apply():
    job = mpijob()
    for key in ("mpiImplementation", "launcherCreationPolicy", "sshAuthMountPath"):
        del job["spec"][key]
    assert list(RULE.check(context(job))) == []


@pytest.mark.parametrize(("field", "value", "supported", "fix"), [
    ("mpiImplementation", "OpenMpi", '"OpenMPI", "Intel", "MPICH"', 'use "OpenMPI"'),
    ("mpiImplementation", "IntelMPI", '"OpenMPI", "Intel", "MPICH"', "use one of them"),
    ("mpiImplementation", "MVAPICH2", '"OpenMPI", "Intel", "MPICH"', "use one of them"),
    ("mpiImplementation", "OpenMP", '"OpenMPI", "Intel", "MPICH"', 'did you mean "OpenMPI"?'),
    ("launcherCreationPolicy", "WaitForWorkersReady ", '"AtStartup", "WaitForWorkersReady"',
     'use "WaitForWorkersReady" (without the spaces)'),
    ("launcherCreationPolicy", "Later", '"AtStartup", "WaitForWorkersReady"', "use one of them"),
], ids=["openmpi-case", "intelmpi", "mvapich", "typo", "trailing-space", "unknown-policy"])
def test_unsupported_values_list_the_choices(field, value, supported, fix):
    (finding,) = RULE.check(context(mpijob(**{field: value})))
    assert finding.rule == "mpi-settings"
    assert finding.path == f"spec.{field}"
    assert finding.problem is Problem.NOT_SUPPORTED
    assert finding.value == value
    assert f"supported values: {supported}" in finding.message
    assert fix in finding.message


def test_admin_can_narrow_the_implementations():
    settings = default_settings().with_rule("mpi-settings", implementations=("OpenMPI", "Intel"))
    (finding,) = RULE.check(context(mpijob(mpiImplementation="MPICH"), settings=settings))
    assert 'supported values: "OpenMPI", "Intel";' in finding.message


@pytest.mark.parametrize(("value", "problem", "says"), [
    ("", Problem.REQUIRED, "must not be empty"),
    ("home/mpiuser/.ssh", Problem.INVALID, 'set it to "/home/mpiuser/.ssh"'),
    ("~/.ssh", Problem.INVALID, '"~" and relative paths are not expanded'),
    ("./.ssh", Problem.INVALID, 'set it to "/home/mpiuser/.ssh"'),
    ("/home/../root/.ssh", Problem.INVALID, 'must not contain ".."'),
], ids=["empty", "relative", "tilde", "dot-relative", "backsteps"])
def test_ssh_auth_mount_path(value, problem, says):
    (finding,) = RULE.check(context(mpijob(sshAuthMountPath=value)))
    assert finding.path == "spec.sshAuthMountPath"
    assert finding.problem is problem
    assert says in finding.message
    if problem is Problem.INVALID:
        assert finding.value == value


def test_every_problem_is_reported_at_once():
    job = mpijob(mpiImplementation="x", launcherCreationPolicy="y", sshAuthMountPath="")
    assert [f.path for f in RULE.check(context(job))] == [
        "spec.mpiImplementation", "spec.launcherCreationPolicy", "spec.sshAuthMountPath"]


@pytest.mark.parametrize("implementations", [(), ("OpenMPI", "MVAPICH")], ids=["none", "unknown"])
def test_admin_cannot_allow_what_the_operator_does_not_know(implementations):
    with pytest.raises(ValueError, match='implementations must be one or more of "OpenMPI", "Intel", "MPICH"'):
        MpiSettingsParams(implementations=implementations)
