import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.interface import Problem
from policies.rules.job_name import _DNS1035_LABEL, JobName, label_problems, max_name_length
from testing.builders import context, mpijob

RULE = JobName()


def check(job, **kw):
    return list(RULE.check(context(job, **kw)))


@pytest.mark.parametrize(("workers", "longest"), [
    (None, 54), (1, 54), (2, 54), (10, 54), (11, 53), (100, 53), (101, 52), (1000, 52), (1001, 51),
], ids=lambda v: str(v))
def test_longest_name_depends_on_the_worker_count(workers, longest):
    assert max_name_length(workers) == longest


@pytest.mark.parametrize(("name", "workers"), [
    ("pi", 2), ("a" * 54, 10), ("a" * 53, 100), ("a-b-9", 2), ("z" * 54, 1),
], ids=["short", "54-for-10", "53-for-100", "dashes-digits", "54-for-1"])
def test_names_that_fit_are_clean(name, workers):
    assert check(mpijob(name, workers=workers)) == []


@pytest.mark.parametrize(("length", "workers", "limit", "derived"), [
    (55, 2, 54, "-worker-1"),
    (54, 11, 53, "-worker-10"),
    (60, 100, 53, "-worker-99"),
    (64, 2, 54, "-worker-1"),
    (53, 101, 52, "-worker-100"),
], ids=["55-for-2", "54-for-11", "60-for-100", "longer-than-a-label", "53-for-101"])
def test_too_long_names_state_the_limit_for_this_worker_count(length, workers, limit, derived):
    name = "a" * length
    (finding,) = check(mpijob(name, workers=workers))
    assert finding.rule == "job-name"
    assert finding.path == "metadata.name"
    assert finding.problem is Problem.INVALID
    assert finding.value == name
    assert f'"{name}{derived}" ({length + len(derived)} characters)' in finding.message
    assert "over the 63 allowed for a DNS-1035 label" in finding.message
    assert f"with {workers} workers the name may be at most {limit} characters" in finding.message
    assert f"shorten it by {length - limit}" in finding.message


def test_without_worker_spec_the_launcher_name_counts():
    job = mpijob("a" * 55, runLauncherAsWorker=True)
    del job["spec"]["mpiReplicaSpecs"]["Worker"]
    (finding,) = check(job)
    assert f'"{"a" * 55}-launcher" (64 characters)' in finding.message
    assert "with no Worker spec the name may be at most 54 characters" in finding.message


@pytest.mark.parametrize("replicas", [None, 0], ids=["omitted", "zero"])
def test_omitted_or_zero_workers_count_as_one_like_the_operator(replicas):
    job = mpijob("a" * 55, workers=replicas)
    (finding,) = check(job)
    assert f'"{"a" * 55}-worker-0"' in finding.message
    assert "with 1 worker the name may be at most 54" in finding.message


@pytest.mark.parametrize(("prefix", "workers", "over"), [
    ("p" * 50, 2, 1), ("p" * 49, 11, 1), ("p" * 58, 2, 9),
], ids=["50-for-2", "49-for-11", "longest-generate-name"])
def test_generate_name_prefix_is_checked_with_five_more_characters(prefix, workers, over):
    job = mpijob("", workers=workers)
    job["metadata"] = {"generateName": prefix}
    (finding,) = check(job, name=prefix + "xxxxx", generated_name=True)
    assert finding.path == "metadata.generateName"
    assert finding.value == prefix
    assert "appends 5 random characters" in finding.message
    limit = max_name_length(workers) - 5
    assert f"the prefix may be at most {limit} characters: it is too long by {over}" in finding.message


def test_generate_name_prefix_that_fits_is_clean():
    job = mpijob("", workers=2)
    job["metadata"] = {"generateName": "p" * 49}
    assert check(job, name="p" * 49 + "xxxxx", generated_name=True) == []


@pytest.mark.parametrize(("name", "says", "suggestion"), [
    ("Pi", ['start with a lowercase letter (it starts with "P")', "(it has 'P')"], "pi"),
    ("1pi", ['start with a lowercase letter (it starts with "1")'], "pi"),
    ("pi.v2", ["(it has '.')"], "pi-v2"),
    ("pi_job", ["(it has '_')"], "pi-job"),
    ("pi-", ["end with a letter or digit"], "pi"),
    ("My_Job.V1", ["start with a lowercase letter", "(it has '.', 'J', 'M', 'V', '_')"], "my-job-v1"),
], ids=["uppercase", "digit-first", "dot", "underscore", "dash-last", "everything"])
def test_names_that_are_not_dns1035_labels_say_why_and_suggest_one(name, says, suggestion):
    (finding,) = check(mpijob(name))
    assert finding.path == "metadata.name"
    assert finding.value == name
    assert "must be a DNS-1035 label" in finding.message
    for part in says:
        assert part in finding.message
    assert f'rename it, e.g. "{suggestion}"' in finding.message


def test_generate_name_prefix_ending_in_dash_is_a_fine_label():
    job = mpijob("")
    job["metadata"] = {"generateName": "pi-gen-"}
    assert check(job, name="pi-gen-xxxxx", generated_name=True) == []


def test_generate_name_prefix_with_bad_characters_names_the_prefix():
    job = mpijob("")
    job["metadata"] = {"generateName": "Pi_gen-"}
    (finding,) = check(job, name="Pi_gen-xxxxx", generated_name=True)
    assert finding.path == "metadata.generateName"
    assert finding.value == "Pi_gen-"
    assert 'e.g. "pi-gen-"' in finding.message


def test_bad_characters_and_length_are_two_findings():
    name = "A" * 60
    findings = check(mpijob(name))
    assert [f.path for f in findings] == ["metadata.name", "metadata.name"]
    assert "DNS-1035 label" in findings[0].message and "shorten it by 6" in findings[1].message


def test_no_name_at_all_is_left_to_the_api_server():
    job = mpijob("")
    job["metadata"] = {}
    assert check(job, name="") == []


@given(st.text(alphabet=st.sampled_from("az09-._AZ\u00e9\u0131\u212a\n "), min_size=1, max_size=6))
def test_a_name_has_label_problems_exactly_when_it_is_not_a_dns1035_label(name):
    """The rule names the problems only for names the DNS-1035 expression refuses."""
    is_label = _DNS1035_LABEL.fullmatch(name) is not None
    assert (label_problems(name) == []) == is_label
