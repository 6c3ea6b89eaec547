"""The working copy the mutations edit shares every subtree with the request, and hands out a
writable map only after copying the maps on its path: the request is never modified, and what
no mutation wrote stays the request's very object (which the patch relies on)."""
from __future__ import annotations

import copy

from policies.mutations.edits import WorkingCopy, set_default, set_value
from testing.builders import mpijob

TEMPLATE = ("spec", "mpiReplicaSpecs", "Launcher", "template")


def test_writable_copies_only_the_maps_on_its_path():
    request = mpijob()
    before = copy.deepcopy(request)
    job = WorkingCopy(request)
    labels = job.writable((*TEMPLATE, "metadata", "labels"))
    labels["a"] = "b"
    assert request == before
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]
    assert launcher is not request["spec"]["mpiReplicaSpecs"]["Launcher"]
    assert launcher["template"]["metadata"] == {"labels": {"a": "b"}}
    # untouched: the request's own objects
    assert job["metadata"] is request["metadata"]
    assert job["spec"]["mpiReplicaSpecs"]["Worker"] is request["spec"]["mpiReplicaSpecs"]["Worker"]
    assert launcher["template"]["spec"] is request["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    assert launcher["replicas"] == 1


def test_a_map_is_copied_once():
    job = WorkingCopy(mpijob())
    first = job.writable((*TEMPLATE, "spec"))
    first["automountServiceAccountToken"] = False
    assert job.writable((*TEMPLATE, "spec")) is first
    assert job.writable(("spec",)) is job["spec"]


def test_null_on_the_way_becomes_a_map_and_a_non_map_refuses_with_nothing_copied():
    request = mpijob()
    request["metadata"]["labels"] = None
    request["metadata"]["annotations"] = "not a map"
    before = copy.deepcopy(request)
    job = WorkingCopy(request)
    assert job.writable(("metadata", "annotations", "x")) is None
    assert job["metadata"] is request["metadata"]
    job.writable(("metadata", "labels"))["a"] = "b"
    assert job["metadata"]["labels"] == {"a": "b"}
    assert request == before


def test_an_edit_that_changes_nothing_copies_nothing():
    request = mpijob()
    request["metadata"]["labels"] = {"a": "b"}
    job = WorkingCopy(request)
    assert set_value(job, ("metadata", "labels"), "a", "b") is False
    assert set_default(job, ("metadata", "labels"), "a", "c") is False
    assert job["metadata"] is request["metadata"]
    assert set_value(job, ("metadata", "labels"), "a", "c") is True
    assert (job["metadata"]["labels"], request["metadata"]["labels"]) == ({"a": "c"}, {"a": "b"})
