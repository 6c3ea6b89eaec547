import pytest

from policies import messages
from policies.interface import Action, Problem
from policies.rules.image_reference import ImageReference
from policies.registry import default_settings
from testing.builders import context, mpijob

RULE = ImageReference()
DIGEST = "sha256:" + "ab" * 32
LAUNCHER = "spec.mpiReplicaSpecs[Launcher].template.spec"
WORKER = "spec.mpiReplicaSpecs[Worker].template.spec"


def job_with_images(launcher="mpioperator/mpi-pi:openmpi", worker="mpioperator/mpi-pi:openmpi", *,
                    launcher_init=(), worker_init=()):
    job = mpijob()
    specs = job["spec"]["mpiReplicaSpecs"]
    for role, image, init in (("Launcher", launcher, launcher_init), ("Worker", worker, worker_init)):
        container = specs[role]["template"]["spec"]["containers"][0]
        if image is None:
            del container["image"]
        else:
            container["image"] = image
        if init:
            specs[role]["template"]["spec"]["initContainers"] = [{"name": f"init-{i}", "image": im}
                                                                 for i, im in enumerate(init)]
    return job


def check(job, **settings):
    ctx_settings = default_settings().with_rule("image-reference", **settings) if settings else None
    return list(RULE.check(context(job, settings=ctx_settings)))


@pytest.mark.parametrize(("launcher", "worker"), [
    ("mpioperator/mpi-pi:openmpi", "mpioperator/mpi-pi:openmpi"),
    ("mpioperator/mpi-pi:openmpi", "docker.io/mpioperator/mpi-pi:openmpi"),
    (f"quay.io/org/mpi@{DIGEST}", f"quay.io/org/mpi:5.0@{DIGEST}"),
    ("ubuntu", "docker.io/library/ubuntu:latest"),
], ids=["identical", "hub-prefix", "same-digest", "implicit-latest"])
def test_same_image_everywhere_is_clean(launcher, worker):
    assert check(job_with_images(launcher, worker)) == []


@pytest.mark.parametrize(("image", "problem", "says"), [
    (None, Problem.REQUIRED, "every container needs an image"),
    ("", Problem.REQUIRED, "every container needs an image"),
    ("MPI/Pi:openmpi", Problem.INVALID, 'must be lowercase; use "mpi/pi:openmpi"'),
    ("mpi-pi:", Problem.INVALID, "ends in ':' with no tag after it"),
    ("https://quay.io/org/mpi", Problem.INVALID, "URL scheme"),
    ("mpi-pi@sha256:123", Problem.INVALID, "64 lowercase hex digits (it has 3 characters)"),
    ("mpi pi", Problem.INVALID, "whitespace"),
], ids=["absent", "empty", "uppercase", "empty-tag", "scheme", "short-digest", "space"])
def test_bad_launcher_image_says_what_is_wrong(image, problem, says):
    (finding,) = check(job_with_images(launcher=image))
    assert finding.rule == "image-reference"
    assert finding.path == f"{LAUNCHER}.containers[0].image"
    assert finding.problem is problem
    assert says in finding.message
    if problem is Problem.INVALID:
        assert finding.value == image
        assert finding.message.startswith("not a valid image reference: ")


def test_reasons_without_their_own_fix_show_the_format():
    (finding,) = check(job_with_images(launcher="org//mpi"))
    assert 'write it as [registry/]repository[:tag][@sha256:digest], e.g. "quay.io/org/app:1.0"' in finding.message


def test_init_containers_of_both_templates_are_checked():
    job = job_with_images(launcher_init=["busybox", "Bad:x"], worker_init=[""])
    paths = [f.path for f in check(job)]
    assert paths == [f"{LAUNCHER}.initContainers[1].image", f"{WORKER}.initContainers[0].image"]


def test_bad_images_in_both_roles_are_all_reported():
    findings = check(job_with_images("A", "B"))
    assert [f.path for f in findings] == [f"{LAUNCHER}.containers[0].image", f"{WORKER}.containers[0].image"]


@pytest.mark.parametrize(("launcher", "worker", "shown"), [
    ("mpioperator/mpi-pi:openmpi", "mpioperator/mpi-pi:intel", ('"mpioperator/mpi-pi:openmpi"', '"mpioperator/mpi-pi:intel"')),
    ("ubuntu:22.04", "docker.io/library/ubuntu:24.04", ('"ubuntu:22.04"', '"ubuntu:24.04"')),
    (f"quay.io/org/mpi:5@{DIGEST}", "quay.io/org/mpi:5", ('"quay.io/org/mpi:5@sha256:abababababab…"', '"quay.io/org/mpi:5"')),
], ids=["tags", "official", "digest-vs-tag"])
def test_different_launcher_and_worker_images_warn(launcher, worker, shown):
    (finding,) = check(job_with_images(launcher, worker))
    assert finding.path == f"{WORKER}.containers[0].image"
    assert finding.ceiling is Action.WARN
    assert f"launcher runs {shown[0]}, workers run {shown[1]}" in finding.message
    assert "MPI ABI mismatch" in finding.message
    assert "use one image for both, pinned by digest" in finding.message
    assert len(messages.line(finding)) <= 256


@pytest.mark.parametrize("length", [60, 120, 250], ids=lambda n: f"{n}-chars")
def test_mismatch_warning_fits_the_api_servers_256_characters(length):
    launcher = "quay.io/" + "l" * (length - 8) + ":1"
    worker = "quay.io/" + "w" * (length - 8) + f":2@{DIGEST}"
    (finding,) = check(job_with_images(launcher, worker))
    line = messages.line(finding)
    assert len(line) <= 256
    assert "quay.io/l" in line and "quay.io/w" in line and "pinned by digest" in line


def test_short_image_stays_whole_when_the_other_is_long():
    (finding,) = check(job_with_images("quay.io/" + "x" * 240, "mpi-pi:intel"))
    assert '"mpi-pi:intel"' in finding.message
    assert len(messages.line(finding)) <= 256


def test_mismatch_compares_only_the_first_containers():
    job = job_with_images()
    job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(
        {"name": "log-shipper", "image": "fluent/fluent-bit:3"})
    assert check(job) == []


def test_mismatch_ignores_init_containers_and_names_the_first_worker_container():
    assert check(job_with_images(worker_init=("busybox:1",))) == []
    (finding,) = check(job_with_images(worker="mpi-pi:intel", launcher_init=("busybox:1",), worker_init=("busybox:1",)))
    assert finding.path == f"{WORKER}.containers[0].image"
    assert finding.ceiling is Action.WARN


def test_no_mismatch_warning_when_an_image_is_already_invalid():
    (finding,) = check(job_with_images("Bad", "mpi-pi:intel"))
    assert finding.problem is Problem.INVALID


def test_mismatch_warning_can_be_turned_off():
    assert check(job_with_images("a:1", "a:2"), warn_on_mismatch=False) == []


def test_digest_pinning_can_be_required():
    findings = check(job_with_images(f"mpi@{DIGEST}", "mpi:1"), require_digest=True)
    pinned = [f for f in findings if f.ceiling is Action.DENY]
    (finding,) = pinned
    assert finding.path == f"{WORKER}.containers[0].image"
    assert finding.value == "mpi:1"
    assert 'pin it by digest so every pod runs the same bits: "mpi:1@sha256:<digest>"' in finding.message


def test_digest_warning_for_an_upstream_image_arrives_whole():
    from policies.messages import WARNING_LIMIT, line

    (finding,) = [f for f in check(job_with_images(f"mpi@{DIGEST}", "mpioperator/mpi-pi:openmpi"), require_digest=True)
                  if f.ceiling is Action.DENY]
    assert len(line(finding)) <= WARNING_LIMIT, line(finding)
