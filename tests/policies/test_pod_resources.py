from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.cluster_view import StaticClusterView
from policies.kube.quantities import BadQuantity, quantity
from policies.kube.pod_resources import (
    NO_DEFAULTS,
    effective_container,
    container_defaults,
    job_pods,
    limit_range_items,
    namespace_limits,
    pod_resources,
    pod_totals,
    request_pod_as_written,
    request_pods,
)
from testing.builders import context, mpijob
from testing.kube_objects import container_limits, limit_range, pod_limits

D = Decimal


def worker(job_resources, *, init=None, ranges=()):
    job = mpijob(worker_resources=job_resources)
    if not job_resources:  # the builder's default resources would otherwise apply
        del job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]
    if init is not None:
        job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["initContainers"] = init
    return job_pods(job, ranges).pods["Worker"]


def test_limit_without_request_becomes_the_request():
    pod = worker({"limits": {"cpu": 2, "memory": "4Gi"}})
    assert pod.requests == {"cpu": D(2), "memory": D(4 * 2**30)}
    assert pod.limits == pod.requests


def test_json_numbers_and_strings_parse_alike():
    assert worker({"requests": {"cpu": 1}, "limits": {"cpu": "1000m"}}).requests["cpu"] == D(1)
    assert worker({"requests": {"cpu": "500m"}}).requests["cpu"] == D("0.5")


def test_unparsable_quantities_are_left_out():
    pod = worker({"requests": {"cpu": "a lot", "memory": "1Gi"}})
    assert pod.requests == {"memory": D(2**30)}


def test_default_request_and_default_fill_missing_values_only():
    ranges = [limit_range("defaults", container_limits(default={"cpu": "2", "memory": "2Gi"},
                                                       default_request={"cpu": "500m", "memory": "1Gi"}))]
    pod = worker({"limits": {"memory": "8Gi"}}, ranges=ranges)
    (container,) = pod.containers
    # the memory limit was given, so its request is the limit (not the LimitRange's defaultRequest)
    assert container.requests == {"memory": D(8 * 2**30), "cpu": D("0.5")}
    assert container.limits == {"memory": D(8 * 2**30), "cpu": D(2)}
    assert container.defaulted_requests == {"cpu": "defaults"}
    assert container.defaulted_limits == {"cpu": "defaults"}


def test_default_limit_without_default_request_defaults_the_request_too():
    ranges = [limit_range("lr", container_limits(default={"cpu": "2"}))]
    (container,) = worker({}, ranges=ranges).containers
    assert container.requests == {"cpu": D(2)} and container.limits == {"cpu": D(2)}


def test_max_without_default_becomes_the_default_for_every_container():
    """Verified on a 1.36 API server: max nvidia.com/gpu 4 gave every container without a GPU limit 4 GPUs."""
    ranges = [limit_range("gpu-max", container_limits(max={"nvidia.com/gpu": "4"}))]
    pods = job_pods(mpijob(worker_resources={"limits": {"cpu": 1}}), ranges)
    for replica_type in ("Launcher", "Worker"):
        assert pods.pods[replica_type].requests["nvidia.com/gpu"] == D(4)
        assert pods.pods[replica_type].limits["nvidia.com/gpu"] == D(4)
        assert pods.pods[replica_type].defaulted_by("nvidia.com/gpu") == ("gpu-max",)
    # a container that states its GPUs keeps them
    assert worker({"limits": {"nvidia.com/gpu": 2}}, ranges=ranges).requests["nvidia.com/gpu"] == D(2)


def test_min_without_default_request_becomes_the_default_request():
    ranges = [limit_range("lr", container_limits(min={"memory": "256Mi"}))]
    (container,) = worker({}, ranges=ranges).containers
    assert container.requests == {"memory": D(256 * 2**20)}
    assert "memory" not in container.limits


def test_first_limit_range_by_name_wins_a_shared_default():
    ranges = [limit_range("b", container_limits(default={"cpu": "4"})),
              limit_range("a", container_limits(default={"cpu": "1"}))]
    assert worker({}, ranges=ranges).requests["cpu"] == D(1)


def test_pod_request_is_the_larger_of_containers_sum_and_largest_init_container():
    job = mpijob(worker_resources={"requests": {"cpu": 1, "memory": "1Gi"}})
    spec = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["containers"].append({"name": "side", "image": "x", "resources": {"requests": {"cpu": 1}}})
    spec["initContainers"] = [
        {"name": "fetch", "image": "x", "resources": {"requests": {"cpu": 3, "memory": "512Mi"}}},
        {"name": "small", "image": "x", "resources": {"requests": {"cpu": 1}}},
    ]
    pod = job_pods(job, ()).pods["Worker"]
    assert pod.requests == {"cpu": D(3), "memory": D(2**30)}


def test_sidecars_add_to_the_pod_and_to_later_init_containers():
    init = [
        {"name": "proxy", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": 1}}},
        {"name": "warmup", "image": "x", "resources": {"requests": {"cpu": 4}}},
    ]
    pod = worker({"requests": {"cpu": 2}}, init=init)
    # running: app 2 + sidecar 1 = 3; while warming up: sidecar 1 + warmup 4 = 5
    assert pod.requests["cpu"] == D(5)
    init[1]["resources"]["requests"]["cpu"] = 1
    assert worker({"requests": {"cpu": 2}}, init=init).requests["cpu"] == D(3)


def test_gpu_request_without_limit_is_a_problem_of_the_spec():
    (problem,) = worker({"requests": {"nvidia.com/gpu": 2}}).problems
    assert problem.resource == "nvidia.com/gpu" and problem.defaulted_by == ""
    assert "without a limit" in problem.message and "set resources.limits.nvidia.com/gpu to 2" in problem.message


def test_gpu_request_different_from_a_defaulted_limit_names_the_limit_range():
    ranges = [limit_range("gpu-max", container_limits(max={"nvidia.com/gpu": "4"}))]
    (problem,) = worker({"requests": {"nvidia.com/gpu": 2}}, ranges=ranges).problems
    assert problem.defaulted_by == "gpu-max"
    assert "request 2 differs from its limit 4 (limit set by LimitRange gpu-max)" in problem.message


def test_request_above_a_defaulted_limit_is_refused():
    ranges = [limit_range("small", container_limits(default={"cpu": "1"}))]
    (problem,) = worker({"requests": {"cpu": 2}}, ranges=ranges).problems
    assert (problem.resource, problem.field, problem.defaulted_by) == ("cpu", "limits", "small")
    assert "cpu request 2 is above its limit 1 (limit set by LimitRange small)" in problem.message


def test_worker_and_launcher_counts():
    pods = job_pods(mpijob(workers=7), ())
    assert dict(pods.counts) == {"Launcher": 1, "Worker": 7}
    assert job_pods(mpijob(workers=None), ()).workers == 0


def test_limit_range_items_apply_the_api_servers_item_defaults():
    (item,) = limit_range_items([limit_range("lr", container_limits(max={"cpu": "4"}, min={"memory": "1Gi"}))])
    assert item.default == {"cpu": D(4)}
    assert item.default_request == {"cpu": D(4), "memory": D(2**30)}


_amount = st.integers(min_value=0, max_value=64).map(D)


@given(app=st.lists(_amount, min_size=1, max_size=4), init=st.lists(_amount, max_size=3))
def test_pod_total_without_sidecars_is_max_of_sum_and_largest_init(app, init):
    defaults = container_defaults([])
    containers = [effective_container(f"c{i}", {"resources": {"requests": {"cpu": str(v)}}}, defaults)
                  for i, v in enumerate(app)]
    containers += [effective_container(f"i{i}", {"resources": {"requests": {"cpu": str(v)}}}, defaults, init=True)
                   for i, v in enumerate(init)]
    assert pod_totals(containers, "requests").get("cpu", D(0)) == max([sum(app)] + init)


@pytest.mark.parametrize("replica", [None, {}, {"template": {"spec": {"containers": "nope"}}}])
def test_missing_or_odd_templates_have_no_resources(replica):
    pod = pod_resources("Worker", replica, [])
    assert pod.requests == {} and pod.containers == ()


# --- the derivation against a plain reference --------------------------------------------------
# Written straight from the API server's rules, with no care for speed: what ``job_pods`` must
# agree with on any mix of containers, init containers, sidecars and LimitRange defaults.

# Few names and amounts, so that containers often share a resource (the sums and peaks are tested)
_RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "hugepages-2Mi", "kubernetes.io/batteries")
_QUANTITIES = (0, 1, 2, 4, "500m", "3", "1Gi", "1.5", "2e3", "lots")
_resource_map = st.dictionaries(st.sampled_from(_RESOURCES), st.sampled_from(_QUANTITIES), max_size=4)


def _parsed_or_none(value):
    try:
        return quantity(value)
    except BadQuantity:
        return None


def _reference_defaults(ranges):
    """resource → (value, LimitRange) for limits and requests: the first LimitRange by name wins."""
    limits, requests = {}, {}
    for lr in sorted(ranges, key=lambda lr: lr["metadata"]["name"]):
        for item in lr["spec"]["limits"]:
            if item["type"] != "Container":
                continue
            parsed = {key: {r: _parsed_or_none(v) for r, v in item.get(key, {}).items()}
                      for key in ("default", "defaultRequest", "max", "min")}
            parsed = {key: {r: v for r, v in values.items() if v is not None} for key, values in parsed.items()}
            default = {**parsed["max"], **parsed["default"]}  # a max without default is the default
            default_request = {**parsed["min"], **default, **parsed["defaultRequest"]}
            for resource, value in default.items():
                limits.setdefault(resource, (value, lr["metadata"]["name"]))
            for resource, value in default_request.items():
                requests.setdefault(resource, (value, lr["metadata"]["name"]))
    return limits, requests


def _reference_container(spec, ranges):
    written = {kind: {r: _parsed_or_none(v) for r, v in (spec.get("resources") or {}).get(kind, {}).items()}
               for kind in ("limits", "requests")}
    limits = {r: v for r, v in written["limits"].items() if v is not None}
    requests = {**limits, **{r: v for r, v in written["requests"].items() if v is not None}}
    default_limits, default_requests = _reference_defaults(ranges)
    defaulted_limits = {r: name for r, (_, name) in default_limits.items() if r not in limits}
    defaulted_requests = {r: name for r, (_, name) in default_requests.items() if r not in requests}
    limits.update({r: default_limits[r][0] for r in defaulted_limits})
    requests.update({r: default_requests[r][0] for r in defaulted_requests})
    return requests, limits, defaulted_requests, defaulted_limits


def _reference_problems(requests, limits):
    """(resource, kind) the API server refuses: overcommitting cpu/memory/storage, or an extended
    resource or hugepages request that is not exactly its limit."""
    found = set()
    for resource, request in requests.items():
        limit = limits.get(resource)
        if resource in ("cpu", "memory", "ephemeral-storage"):
            if limit is not None and request > limit:
                found.add((resource, "above"))
        elif resource.startswith("hugepages-") or ("/" in resource and "kubernetes.io" not in resource):
            if limit is None:
                found.add((resource, "no limit"))
            elif limit != request:
                found.add((resource, "differs"))
    return found


def _reference_total(regular, init, sidecar_flags, resource):
    """max(sum of app containers and sidecars, peak while each init container runs), or None when
    the pod does not count the resource at all."""
    running = [values.get(resource) for values in regular] + [v.get(resource) for v, s in zip(init, sidecar_flags) if s]
    counted = [v for v in running if v is not None]
    peaks, sidecars = [], Decimal(0)
    for values, sidecar in zip(init, sidecar_flags):
        amount = values.get(resource, Decimal(0))
        if sidecar:
            sidecars += amount
            peaks.append(sidecars)
        else:
            peaks.append(sidecars + amount)
    peak = max(peaks, default=Decimal(0))
    if counted:
        return max(sum(counted, Decimal(0)), peak)
    return peak if peak > 0 else None


_container = st.fixed_dictionaries({"resources": st.fixed_dictionaries({}, optional={
    "limits": _resource_map, "requests": _resource_map})})
_init_container = st.tuples(_container, st.booleans()).map(
    lambda pair: {**pair[0], "restartPolicy": "Always"} if pair[1] else pair[0])
_item = st.fixed_dictionaries({"type": st.sampled_from(["Container", "Pod"])}, optional={
    key: st.dictionaries(st.sampled_from(_RESOURCES), st.sampled_from(("1", "2", "500m", "1Gi", "0")), max_size=2)
    for key in ("default", "defaultRequest", "max", "min")})
_ranges = st.lists(st.tuples(st.sampled_from(["a", "b", "defaults"]), st.lists(_item, min_size=1, max_size=2)),
                   max_size=2, unique_by=lambda pair: pair[0])


# ~4 ms an example, most of it generating the job and its LimitRanges: CI runs 2,000
@settings(max_examples=min(settings.default.max_examples, 2000))
@given(app=st.lists(_container, min_size=1, max_size=3), init=st.lists(_init_container, max_size=3), ranges=_ranges)
def test_job_pods_agree_with_a_plain_reference(app, init, ranges):
    job = mpijob()
    pod_spec = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    pod_spec["containers"] = [{"name": f"c{i}", "image": "x", **c} for i, c in enumerate(app)]
    pod_spec["initContainers"] = [{"name": f"i{i}", "image": "x", **c} for i, c in enumerate(init)]
    objects = [limit_range(name, *items) for name, items in ranges]
    pod = job_pods(job, objects).pods["Worker"]

    specs = pod_spec["containers"] + pod_spec["initContainers"]  # the API server's order
    expected = [_reference_container(spec, objects) for spec in specs]
    assert [c.name for c in pod.containers] == [spec["name"] for spec in specs]
    for container, (requests, limits, defaulted_requests, defaulted_limits) in zip(pod.containers, expected):
        assert (container.requests, container.limits) == (requests, limits)
        assert (container.defaulted_requests, container.defaulted_limits) == (defaulted_requests, defaulted_limits)
        # what the spec states first, then what LimitRanges filled in
        assert list(container.requests)[len(requests) - len(defaulted_requests):] == list(container.defaulted_requests)
        assert list(container.limits)[len(limits) - len(defaulted_limits):] == list(container.defaulted_limits)
    kinds = {"without a limit": "no limit", "differs from its limit": "differs", "is above its limit": "above"}
    for container, (requests, limits, _, _) in zip(pod.containers, expected):
        found = {(p.resource, kind) for p in pod.problems if p.container is container
                 for words, kind in kinds.items() if words in p.message}
        assert found == _reference_problems(requests, limits)
        assert len([p for p in pod.problems if p.container is container]) == len(found)

    regular = [e[0] for e in expected[:len(app)]]
    init_requests = [e[0] for e in expected[len(app):]]
    sidecars = [spec.get("restartPolicy") == "Always" for spec in pod_spec["initContainers"]]
    for resource in _RESOURCES:
        assert pod.requests.get(resource) == _reference_total(regular, init_requests, sidecars, resource), resource


@settings(max_examples=min(settings.default.max_examples, 1000))  # ~4 ms an example
@given(app=st.lists(_container, min_size=1, max_size=2), ranges=_ranges)
def test_request_pods_with_and_without_limit_ranges_match_job_pods(app, ranges):
    job = mpijob()
    job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"] = [
        {"name": f"c{i}", "image": "x", **c} for i, c in enumerate(app)]
    objects = tuple(limit_range(name, *items) for name, items in ranges)
    ctx = context(job, cluster=StaticClusterView(ranges={"team-a": objects}))
    for pods, expected in ((request_pods(ctx), job_pods(job, objects)),
                           (request_pods(ctx, limit_ranges=False), job_pods(job, ()))):
        assert pods.counts == expected.counts
        for replica_type, pod in expected.pods.items():
            mine = pods.pods[replica_type]
            assert (mine.requests, mine.limits, mine.containers) == (pod.requests, pod.limits, pod.containers)
            assert [(p.container.path, p.resource, p.message, p.defaulted_by) for p in mine.problems] == \
                [(p.container.path, p.resource, p.message, p.defaulted_by) for p in pod.problems]
    for replica_type, pod in job_pods(job, ()).pods.items():  # one pod as written, alone
        mine = request_pod_as_written(ctx, replica_type)
        assert (mine.requests, mine.limits, mine.containers) == (pod.requests, pod.limits, pod.containers)
        assert [(p.container.path, p.message) for p in mine.problems] == \
            [(p.container.path, p.message) for p in pod.problems]


def test_without_limit_range_defaults_the_pods_are_derived_once():
    ranges = (limit_range("bounds", container_limits(min={"cpu": "100m"}, default_request={"cpu": "100m"})),)
    ctx = context(mpijob(), cluster=StaticClusterView(ranges={"team-a": ()}))
    assert request_pods(ctx) is request_pods(ctx, limit_ranges=False)
    assert request_pod_as_written(ctx, "Worker") is request_pods(ctx).pods["Worker"]
    ctx = context(mpijob(), cluster=StaticClusterView(ranges={"team-a": ranges}))
    assert request_pods(ctx) is not request_pods(ctx, limit_ranges=False)
    assert request_pods(ctx) is request_pods(ctx)  # once per request
    worker = request_pod_as_written(ctx, "Worker")
    assert worker is request_pod_as_written(ctx, "Worker")
    assert worker is not request_pods(ctx).pods["Worker"]
    assert worker.containers == job_pods(ctx.job, ()).pods["Worker"].containers
    assert request_pod_as_written(ctx, "Master") is None


# --- LimitRanges, once per change ------------------------------------------------------------

def test_limit_ranges_are_parsed_once_per_snapshot_of_the_namespace():
    ranges = (limit_range("defaults", container_limits(default={"cpu": "1"})),)
    first = namespace_limits(ranges)
    assert namespace_limits(ranges) is first
    changed = (limit_range("defaults", container_limits(default={"cpu": "2"})),)  # a new snapshot
    assert namespace_limits(changed).defaults.limits == {"cpu": (D(2), "defaults")}
    assert namespace_limits(ranges) is first


def test_namespace_limits_sort_items_by_kind_and_keep_the_tightest_bound():
    ranges = (limit_range("b", container_limits(max={"nvidia.com/gpu": "4", "cpu": "8"})),
              limit_range("a", pod_limits(max={"nvidia.com/gpu": "4"}, min={"memory": "1Gi", "cpu": "1"})),
              limit_range("c", container_limits(max={"nvidia.com/gpu": "2"})))
    limits = namespace_limits(ranges)
    assert [i.limit_range for i in limits.container_items] == ["b", "c"]
    assert [i.limit_range for i in limits.pod_items] == ["a"]
    assert limits.gpu_bounds == {"nvidia.com/gpu": (D(2), "c"), "cpu": (D(8), "b")}
    assert namespace_limits(ranges[:2]).gpu_bounds["nvidia.com/gpu"] == (D(4), "a")  # a tie: the first by name
    (pod_item,) = limits.pod_items
    assert pod_item.sorted_min == (("cpu", D(1)), ("memory", D(2**30)))


# Small app containers, so that the peak while init containers run often decides
@given(app=st.lists(st.integers(0, 4).map(D), min_size=1, max_size=2),
       init=st.lists(st.tuples(_amount, st.booleans()), max_size=4))
def test_pod_total_with_sidecars_agrees_with_the_reference(app, init):
    def cpu(value, **fields):
        return {"resources": {"requests": {"cpu": str(value)}}, **fields}

    containers = [effective_container(f"c{i}", cpu(v), NO_DEFAULTS) for i, v in enumerate(app)]
    containers += [effective_container(f"i{i}", cpu(v, **({"restartPolicy": "Always"} if sidecar else {})),
                                       NO_DEFAULTS, init=True) for i, (v, sidecar) in enumerate(init)]
    expected = _reference_total([{"cpu": v} for v in app], [{"cpu": v} for v, _ in init], [s for _, s in init], "cpu")
    assert pod_totals(containers, "requests")["cpu"] == expected
