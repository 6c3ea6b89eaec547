"""Every pod of upstream's PodSecurity fixtures (tests/data/pod-security: baseline and
restricted, v1.0 to the newest, pass and fail), put as an MPIJob's Launcher and Worker template,
through /validate in a namespace enforcing the fixture's level and version: a ``fail`` pod's job
is denied with ``[pod-security]`` naming each replica it is in, a ``pass`` pod's job has no
``pod-security`` finding."""
from __future__ import annotations

import pytest

from policies.cluster_view import StaticClusterView
from policies.config.reader import parse_policy
from policies.interface import Action
from testing.app_client import Webhook, webhook
from testing.builders import admission_review
from testing.pod_security_corpus import (REFUSED_BY_THE_SCHEMA, Fixture, base_pod, every_level_version, fixtures, job_with,
                                         namespace_of, pod)

FIXTURES = fixtures()
LEVEL_VERSIONS = list(every_level_version())


# The corpus has every upstream policy version, v1.37 too: judged as an API server that knows them
# all (the default, a 1.36 API server's, evaluates v1.37 as v1.36: tests/policies/rules/test_pod_security.py)
EVERY_VERSION = parse_policy("{rules: {pod-security: {params: {apiServerVersion: latest}}}}")


@pytest.fixture(scope="module")
def app() -> Webhook:
    return webhook(cluster=StaticClusterView(namespaces={f.namespace: namespace_of(f) for f in FIXTURES}),
                   policy=EVERY_VERSION)


def test_the_corpus_is_upstreams_whole():
    assert len(FIXTURES) == 4537
    assert {level for level, _ in LEVEL_VERSIONS} == {"baseline", "restricted"}
    assert {f.verdict for f in FIXTURES} == {"pass", "fail"}


def mismatch(app: Webhook, fixture: Fixture, launcher: dict, worker: dict, named: tuple[str, ...]) -> str | None:
    """What differs from the fixture's verdict for this job, or None."""
    answer = app.review("/validate", admission_review(job_with(launcher, worker), namespace=fixture.namespace))
    response = answer["response"]
    ours = [o for o in app.last.verdict.outcomes if o.finding.rule == "pod-security"]
    if fixture.verdict == "pass":
        return f"{fixture}: {[o.finding.message for o in ours]}" if ours else None
    if fixture.pod.startswith(REFUSED_BY_THE_SCHEMA):
        shape = {o.finding.rule for o in app.last.verdict.outcomes}
        return None if not response["allowed"] and shape == {"object-shape"} else f"{fixture}: {shape}"
    denied = [o.finding for o in ours if o.action is Action.DENY]
    replicas = {name for name in ("Launcher", "Worker") for f in denied
                if f.path.startswith(f"spec.mpiReplicaSpecs[{name}].template.") and f.message.startswith(f"the {name} pods violate")}
    if response["allowed"] or response["status"]["code"] != 403 or "[pod-security]" not in response["status"]["message"] \
            or replicas != set(named):
        return f"{fixture}: allowed={response['allowed']} replicas named {sorted(replicas)}, expected {list(named)}"
    return None


@pytest.mark.parametrize(("level", "version"), LEVEL_VERSIONS, ids=[f"{lv[0]}-{lv[1]}" for lv in LEVEL_VERSIONS])
def test_each_fixture_pod_as_both_templates_gets_the_fixtures_verdict(app, level, version):
    mismatches = [m for f in FIXTURES if (f.level, f.version) == (level, version)
                  if (m := mismatch(app, f, pod(f.pod), pod(f.pod), ("Launcher", "Worker")))]
    assert mismatches == []


@pytest.mark.ci_only
@pytest.mark.parametrize(("level", "version"), LEVEL_VERSIONS, ids=[f"{lv[0]}-{lv[1]}" for lv in LEVEL_VERSIONS])
def test_each_fixture_pod_as_one_template_beside_the_base_pod(app, level, version):
    base = base_pod(level, version)
    mismatches = []
    for fixture in (f for f in FIXTURES if (f.level, f.version) == (level, version)):
        mismatches += [m for m in (mismatch(app, fixture, base, pod(fixture.pod), ("Worker",)),
                                   mismatch(app, fixture, pod(fixture.pod), base, ("Launcher",))) if m]
    assert mismatches == []
