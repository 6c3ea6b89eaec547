from policies import messages
from policies.interface import Problem
from policies.cluster_view import StaticClusterView
from policies.rules.kueue_queue import KueueQueue
from testing.builders import context, mpijob
from testing.kube_objects import local_queue

RULE = KueueQueue()


def job_in_queue(queue):
    job = mpijob()
    if queue is not None:
        job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return job


def check(job, queues):
    return list(RULE.check(context(job, cluster=StaticClusterView(queues=queues))))


def test_unknown_queue_names_the_existing_ones():
    queues = {"team-a": [local_queue("default"), local_queue("gpu")]}
    (finding,) = check(job_in_queue("gpus"), queues)
    assert finding.path == "metadata.labels[kueue.x-k8s.io/queue-name]"
    assert finding.problem is Problem.POLICY
    assert finding.message == ('LocalQueue "gpus" does not exist in namespace team-a (LocalQueues here: default, '
                               "gpu); Kueue would keep the job suspended with no visible reason; set the label to "
                               "one of them")


def test_namespace_without_queues():
    (finding,) = check(job_in_queue("gpu"), {"team-b": [local_queue("gpu", "team-b")]})
    assert "(it has no LocalQueue at all)" in finding.message and "ask your cluster administrator" in finding.message


def test_existing_queue_no_label_or_no_kueue_say_nothing():
    queues = {"team-a": [local_queue("gpu")]}
    assert check(job_in_queue("gpu"), queues) == []
    assert check(job_in_queue(None), queues) == []
    assert check(job_in_queue("gpu"), None) == []  # the LocalQueue CRD is not installed


def test_as_many_queue_names_as_a_warning_holds():
    queues = {"team-a": [local_queue(f"queue-with-a-rather-long-name-{i}") for i in range(7)]}
    (finding,) = check(job_in_queue("gpu"), queues)
    line = messages.line(finding)
    assert len(line) <= 256
    assert "LocalQueues here: queue-with-a-rather-long-name-0, " in finding.message and ", …)" in finding.message


def test_a_queue_created_later_is_seen_on_the_next_check():
    """Queue names are read once per snapshot of the namespace's LocalQueues."""
    before = {"team-a": [local_queue("default")]}
    (finding,) = check(job_in_queue("gpu"), before)
    assert "(LocalQueues here: default)" in finding.message
    assert len(check(job_in_queue("gpu"), before)) == 1
    assert check(job_in_queue("gpu"), {"team-a": [local_queue("default"), local_queue("gpu")]}) == []
