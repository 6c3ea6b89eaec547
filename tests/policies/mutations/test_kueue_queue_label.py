import pytest

from policies.cluster_view import StaticClusterView
from policies.mutations.kueue_queue_label import KueueQueueLabel, KueueQueueLabelParams
from policies.registry import default_settings
from testing.builders import mpijob, run_mutation

MUTATION = KueueQueueLabel()
QUEUE = "kueue.x-k8s.io/queue-name"


def configured(**params):
    return default_settings().with_mutation("kueue-queue-label", **params)


TEAM_A = configured(queues={"team-a": "team-a-queue"})


def local_queue(name):
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": {"clusterQueue": "cluster"}}


def test_nothing_happens_without_a_configured_queue():
    job = mpijob()
    edited, outcome = run_mutation(MUTATION, job)
    assert outcome.changed is False
    assert outcome.warnings == ()
    assert edited == job


def test_namespace_queue_is_added_creating_the_labels_map():
    job, outcome = run_mutation(MUTATION, mpijob(), settings=TEAM_A)
    assert outcome.changed is True
    assert outcome.warnings == ()
    assert job["metadata"] == {"name": "pi", "labels": {QUEUE: "team-a-queue"}}


def test_other_labels_are_kept():
    job = mpijob()
    job["metadata"]["labels"] = {"app": "train", "example.com/a~b": "x"}
    edited, _ = run_mutation(MUTATION, job, settings=TEAM_A)
    assert edited["metadata"]["labels"] == {"app": "train", "example.com/a~b": "x", QUEUE: "team-a-queue"}


def test_missing_metadata_is_created():
    job = mpijob()
    del job["metadata"]
    edited, outcome = run_mutation(MUTATION, job, settings=TEAM_A, name="")
    assert outcome.changed is True
    assert edited["metadata"] == {"labels": {QUEUE: "team-a-queue"}}


def test_other_namespaces_get_the_default_queue_or_nothing():
    both = configured(queues={"team-a": "team-a-queue"}, default_queue="common-queue")
    job, _ = run_mutation(MUTATION, mpijob(), settings=both, namespace="team-b")
    assert job["metadata"]["labels"] == {QUEUE: "common-queue"}
    job, _ = run_mutation(MUTATION, mpijob(), settings=both, namespace="team-a")
    assert job["metadata"]["labels"] == {QUEUE: "team-a-queue"}
    job, outcome = run_mutation(MUTATION, mpijob(), settings=TEAM_A, namespace="team-b")
    assert outcome.changed is False
    assert "labels" not in job["metadata"]


@pytest.mark.parametrize("existing", ["users-queue", "default", ""], ids=["user", "kueue-default", "empty"])
def test_an_existing_label_is_never_replaced(existing):
    job = mpijob()
    job["metadata"]["labels"] = {QUEUE: existing}
    edited, outcome = run_mutation(MUTATION, job, settings=configured(default_queue="common-queue"))
    assert outcome.changed is False
    assert edited == job


@pytest.mark.parametrize("existing", [[local_queue("other")], []], ids=["other-queue", "no-queue"])
def test_a_queue_known_to_be_missing_is_not_set_and_said(existing):
    """A label naming a missing LocalQueue keeps the job suspended, and the kueue-queue rule would
    flag it: the mutation would have created a violation."""
    cluster = StaticClusterView(queues={"team-a": existing})
    job = mpijob()
    edited, outcome = run_mutation(MUTATION, job, settings=TEAM_A, cluster=cluster)
    assert outcome.changed is False
    assert edited == job
    assert outcome.warnings == (
        'namespace team-a has no LocalQueue "team-a-queue", so the job was not given the '
        "kueue.x-k8s.io/queue-name label and Kueue does not queue it; ask the cluster administrator to create it",
    )
    assert len(f"[{MUTATION.id}] {outcome.warnings[0]}") <= 256


def test_labelled_job_passes_the_kueue_queue_rule():
    from policies.engine import evaluate
    from policies.rules.kueue_queue import KueueQueue
    from testing.builders import context

    cluster = StaticClusterView(queues={"team-a": [local_queue("team-a-queue")]})
    job, _ = run_mutation(MUTATION, mpijob(), settings=TEAM_A, cluster=cluster)
    verdict = evaluate(context(job, settings=TEAM_A, cluster=cluster), rules=[KueueQueue()])
    assert verdict.outcomes == ()


@pytest.mark.parametrize("cluster", [
    StaticClusterView(queues={"team-a": [local_queue("team-a-queue")]}),
    StaticClusterView(queues=None),  # Kueue not installed: nothing to say
    StaticClusterView(queues={}, available=False, unavailable_reason="caches syncing"),
], ids=["queue-exists", "no-kueue", "cache-unavailable"])
def test_no_warning_unless_the_queue_is_known_to_be_missing(cluster):
    job, outcome = run_mutation(MUTATION, mpijob(), settings=TEAM_A, cluster=cluster)
    assert job["metadata"]["labels"] == {QUEUE: "team-a-queue"}
    assert outcome.warnings == ()


@pytest.mark.parametrize(("params", "message"), [
    ({"queues": {"team-a": "Team_A"}}, "queue 'Team_A' for namespace team-a is not a LocalQueue name: use "
                                       "lowercase letters, digits, '-' and '.', at most 63 characters, "
                                       "starting and ending with a letter or digit"),
    ({"queues": {"team-a": "q" * 64}}, f"queue '{'q' * 64}' for namespace team-a is not a LocalQueue name"),
    ({"queues": {"team-a": None}}, "queue None for namespace team-a is not a LocalQueue name"),
    ({"default_queue": "-common-queue"}, "default queue '-common-queue' is not a LocalQueue name"),
    ({"queues": ["team-a"]}, "queues must map each namespace to a LocalQueue name, not a list"),
], ids=["uppercase", "too-long", "none", "leading-dash", "not-a-map"])
def test_bad_settings_are_refused_when_loaded(params, message):
    with pytest.raises(ValueError) as raised:
        KueueQueueLabelParams(**params)
    assert str(raised.value).startswith(message)


def test_settings_from_the_policy_file():
    from policies.config import PolicyError
    from policies.config.reader import parse_policy

    policy = parse_policy("mutations:\n  kueue-queue-label: {params: {queues: {team-a: qa}, defaultQueue: common-queue}}\n")
    params = policy.settings_for("team-a", {}).params("kueue-queue-label")
    assert (dict(params.queues), params.default_queue) == ({"team-a": "qa"}, "common-queue")
    with pytest.raises(PolicyError, match=r"mutations.kueue-queue-label.params: queue 'QA' for namespace team-a "):
        parse_policy("mutations:\n  kueue-queue-label: {params: {queues: {team-a: QA}}}\n")


def test_params_do_not_share_the_callers_map():
    queues = {"team-a": "team-a-queue"}
    params = KueueQueueLabelParams(queues=queues)
    queues["team-b"] = "other"
    assert dict(params.queues) == {"team-a": "team-a-queue"}
    with pytest.raises(TypeError):
        params.queues["team-c"] = "x"  # type: ignore[index]


def test_second_pass_changes_nothing():
    once, _ = run_mutation(MUTATION, mpijob(), settings=TEAM_A)
    twice, outcome = run_mutation(MUTATION, once, settings=TEAM_A)
    assert outcome.changed is False
    assert twice == once
