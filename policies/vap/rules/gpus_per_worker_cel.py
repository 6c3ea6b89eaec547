"""``gpus-per-worker`` in CEL: GPUs per rank pod within ``max``, and extended resources written
the way the API server will accept them in the pods.

What is exported, per pod template (Launcher and Worker):

- every extended resource (domain-qualified, outside kubernetes.io) of every container and
  init container is a whole number of 0 or more, and a request has an equal limit;
- for a rank pod (the Worker; the Launcher too with ``runLauncherAsWorker``) whose GPUs are all
  of one resource name (the usual case, one vendor): the pod's GPUs, counted as Kubernetes
  counts them (app containers plus sidecars, each by its limit or else its request), and each
  other init container's, are at most ``max``.

Left to the webhook, and why: an init container's GPUs *plus those of the sidecars started
before it* (a running sum in list order: a nested walk in CEL), the totals of a pod that mixes
GPU resource names (a per-name sum is a walk per name; here only each container's own amount
is held to ``max``), and a namespace LimitRange's GPU maximum (cluster state).

Each expression walks each container once, and each container's own resources maps once.
"""
from __future__ import annotations

from policies.vap import cel_text as cel
from policies.vap.checks import Validation, param
from policies.vap.job_fields_cel import REPLICA_TYPES, WORKER, has_replica, launcher_as_worker, pod_list, replica, replica_path

RULE = "gpus-per-worker"
MAX = param("max")
GPU_SUFFIX = "/gpu"


def validations() -> list[Validation]:
    found = [_devices(t) for t in REPLICA_TYPES]
    found += [_total(t) for t in REPLICA_TYPES]
    return found


# --- per container -------------------------------------------------------------------------
def _limits(c: str) -> tuple[str, str]:
    return f"has({c}.resources) && has({c}.resources.limits)", f"{c}.resources.limits"


def _requests(c: str) -> tuple[str, str]:
    return f"has({c}.resources) && has({c}.resources.requests)", f"{c}.resources.requests"


def _extended(k: str) -> str:
    return (f"({k}.contains('/') && !{k}.startsWith('kubernetes.io/') && "
            f"!{k}.matches('^[^/]*[.]kubernetes[.]io/') && !{k}.startsWith('requests.'))")


def _device_problem(c: str) -> str:
    """The container has an extended resource that is not whole, or requested without an
    equal limit."""
    has_limits, limits = _limits(c)
    has_requests, requests = _requests(c)
    whole = cel.whole_and_not_negative
    limit_ok = f"({has_limits} && k in {limits} && {whole(limits + '[k]')})"
    differs = f"{cel.quantity(limits + '[k]')}.compareTo({cel.quantity(requests + '[k]')}) != 0"
    return (f"(({has_limits}) && {limits}.exists(k, {_extended('k')} && !{whole(limits + '[k]')})) || "
            f"(({has_requests}) && {requests}.exists(k, {_extended('k')} && "
            f"(!{whole(requests + '[k]')} || !{limit_ok} || {differs})))")


def _device_field(c: str) -> str:
    """``limits[r]`` or ``requests[r]``: where the webhook reports a container's first device
    problem (a request without an equal limit is reported at the limit)."""
    has_limits, limits = _limits(c)
    has_requests, requests = _requests(c)
    whole = cel.whole_and_not_negative
    bad_limit = f"{_extended('k')} && !{whole(limits + '[k]')}"
    bad_request = f"{_extended('k')} && !{whole(requests + '[k]')}"
    return (f"(({has_limits}) && {limits}.exists(k, {bad_limit}) ? 'limits[' + {limits}.filter(k, {bad_limit})[0] + ']' : "
            f"(({has_requests}) && {requests}.exists(k, {bad_request}) ? "
            f"'requests[' + {requests}.filter(k, {bad_request})[0] + ']' : "
            f"(({has_requests}) ? 'limits[' + {requests}.filter(k, {_extended('k')})[0] + ']' : '')))")


def _gpu_keys(c: str) -> str:
    has_limits, limits = _limits(c)
    has_requests, requests = _requests(c)
    return (f"((({has_limits}) ? {limits}.filter(k, k.endsWith('{GPU_SUFFIX}')) : []) + "
            f"(({has_requests}) ? {requests}.filter(k, k.endsWith('{GPU_SUFFIX}')) : []))")


def _amount(c: str, resource: str) -> str:
    """The container's amount of ``resource`` as Kubernetes counts it: the limit, else the
    request, else 0."""
    has_limits, limits = _limits(c)
    has_requests, requests = _requests(c)
    return (f"({has_limits} && {resource} in {limits} ? {cel.whole_amount(f'{limits}[{resource}]')} : "
            f"({has_requests} && {resource} in {requests} ? {cel.whole_amount(f'{requests}[{resource}]')} : 0))")


def _sidecar(c: str) -> str:
    return f"(has({c}.restartPolicy) && {c}.restartPolicy == 'Always')"


# --- per pod template ----------------------------------------------------------------------
def _lists(root: str, replica_type: str) -> tuple[str, str]:
    return pod_list(root, replica_type, "containers"), pod_list(root, replica_type, "initContainers")


def _same_containers(replica_type: str) -> str:
    """On UPDATE, the stored object's containers ask for the same resources in the same order
    (and its init containers are sidecars alike): its findings are these findings. Only what
    the findings depend on is compared, not whole containers with their env lists."""
    new_containers, new_init = _lists(cel.NEW, replica_type)
    old_containers, old_init = _lists(cel.OLD, replica_type)

    def resources(containers: str) -> str:
        # [resources] or []: both branches lists, as the type checker wants them alike.
        return f"{containers}.map(c, has(c.resources) ? [c.resources] : [])"

    def restart_policies(containers: str) -> str:
        return f"{containers}.map(c, has(c.restartPolicy) ? c.restartPolicy : '')"

    return (f"({cel.UPDATE} && {resources(old_containers)} == {resources(new_containers)} && "
            f"{resources(old_init)} == {resources(new_init)} && "
            f"{restart_policies(old_init)} == {restart_policies(new_init)})")


def _devices(replica_type: str) -> Validation:
    containers, init = _lists(cel.NEW, replica_type)
    v = f"devices{replica_type}"
    bad_app, bad_init = f"variables.{v}App", f"variables.{v}Init"
    base = f"{replica_path(replica_type)}.template.spec"
    app_index, init_index = f"{bad_app}.indexOf(true)", f"{bad_init}.indexOf(true)"
    path = (f"({bad_app}.exists(b, b) ? '{base}.containers[' + string({app_index}) + '].resources.' + "
            f"{containers}.map(c, {_device_field('c')})[{app_index}] : "
            f"'{base}.initContainers[' + string({init_index}) + '].resources.' + "
            f"{init}.map(c, {_device_field('c')})[{init_index}])")
    message = (f"'[{RULE}] ' + {path} + ': Invalid value: extended resources such as GPUs are counted in whole "
               "units of 0 or more, and a request needs a limit equal to it: set resources.limits to a whole "
               "number such as 1, and leave out the request (a limit alone is also the request)'")
    failing = f"({bad_app}.exists(b, b) || {bad_init}.exists(b, b))"
    return Validation(
        v, f"!{failing} || {_same_containers(replica_type)}", message,
        ((f"{v}App", f"{containers}.map(c, {_device_problem('c')})"),
         (f"{v}Init", f"{init}.map(c, {_device_problem('c')})")))


def _total(replica_type: str) -> Validation:
    """GPUs of the rank pod: exact when the pod names one GPU resource (see the module)."""
    containers, init = _lists(cel.NEW, replica_type)
    v = f"gpus{replica_type}"
    var = f"variables.{v}"
    keys, resource = f"{var}Keys", f"{var}Resource"
    single = f"{keys}.all(l, l.all(k, k == {resource}))"
    app = f"{containers}.map(c, {_amount('c', resource)})"
    sidecars = f"{init}.filter(c, {_sidecar('c')}).map(c, {_amount('c', resource)})"
    alone = f"{init}.filter(c, !{_sidecar('c')}).map(c, {_amount('c', resource)})"
    running = f"{var}App.sum() + {var}Sidecars.sum()"
    # containers and initContainers are lists of two schema types: walked one after the other,
    # never concatenated (the API server's type check has no '+' for them).
    over_max = f"{_gpu_keys('c')}.exists(k, {_amount('c', 'k')} > {MAX})"
    any_container = f"({containers}.exists(c, {over_max}) || {init}.exists(c, {over_max}))"
    over = (f"{resource} != '' && ({single} ? ({var}Running > {MAX} || {var}Alone.exists(a, a > {MAX})) : "
            f"{any_container})")
    rank_pod = "true" if replica_type == WORKER else launcher_as_worker(cel.NEW)
    if replica_type == WORKER:
        ratchet = f"({_same_containers(replica_type)} && {_worker_replicas(cel.OLD)} == {_worker_replicas(cel.NEW)})"
    else:
        ratchet = f"({_same_containers(replica_type)} && {launcher_as_worker(cel.OLD)})"
    expression = f"!({rank_pod}) || !({over}) || {ratchet}"
    return Validation(v, expression, _total_message(replica_type, var, resource), (
        (f"{v}Keys", f"{containers}.map(c, {_gpu_keys('c')}) + {init}.map(c, {_gpu_keys('c')})"),
        (f"{v}Resource", f"{keys}.exists(l, size(l) > 0) ? {keys}.filter(l, size(l) > 0)[0][0] : ''"),
        (f"{v}App", app),
        (f"{v}Sidecars", sidecars),
        (f"{v}Alone", alone),
        (f"{v}Running", running),
    ))


def _worker_replicas(root: str) -> str:
    """The Worker count (0 when unset): part of the webhook's message, so a change is a new finding."""
    r = f"{replica(root, WORKER)}.replicas"
    return f"({has_replica(root, WORKER)} && has({r}) ? {r} : 0)"


def _total_message(replica_type: str, var: str, resource: str) -> str:
    role = "a worker pod" if replica_type == WORKER else "the launcher pod (it runs ranks too)"
    base = f"{replica_path(replica_type)}.template.spec"
    containers, init = _lists(cel.NEW, replica_type)
    # The peak: while the app containers and sidecars run, or while an init container runs.
    alone = f"(size({var}Alone) > 0 ? {var}Alone.max() : 0)"
    running_over = f"{var}Running >= {alone}"
    asked = f"({running_over} ? {var}Running : {alone})"
    app_running = f"{var}App.filter(a, a > 0)"
    sidecars_running = f"{var}Sidecars.filter(a, a > 0)"
    # One container asks for all of it (an app container or a sidecar): the message names its field.
    one = f"size({app_running}) + size({sidecars_running}) == 1"
    one_app = f"size({app_running}) == 1"
    app_index = f"{var}App.map(a, a > 0).indexOf(true)"
    sidecar_index = f"{init}.map(c, {_sidecar('c')} && {_amount('c', resource)} > 0).indexOf(true)"
    has_limits, limits = _limits("c")

    def field(containers_list: str, key: str, index: str) -> str:
        kind = f"{containers_list}.map(c, {has_limits} && {resource} in {limits} ? 'limits' : 'requests')[{index}]"
        return f"'{base}.{key}[' + string({index}) + '].resources.' + {kind} + '[' + {resource} + ']'"

    container_path = (f"({one_app} ? {field(containers, 'containers', app_index)} : "
                      f"{field(init, 'initContainers', sidecar_index)})")
    path = f"({running_over} && {one} ? {container_path} : '{base}')"
    parts = (f"(!({running_over}) ? ' while its init containers run' : ({one} ? '' : "
             f"'; its containers ask ' + ({app_running} + {sidecars_running}).map(a, string(a)).join(' + ')))")
    return (f"'[{RULE}] ' + {path} + ': Invalid value: ' + string({asked}) + ': {role} may use at most ' + "
            f"string({MAX}) + ' ' + {resource} + ' (asked ' + string({asked}) + {parts} + '); lower it to ' + "
            f"string({MAX}) + ' or fewer per pod'")
