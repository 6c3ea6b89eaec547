"""Where a request's time goes: the webhook's Flask app in this process, with the example policy
and the cluster state of one benchmark namespace, profiled over many requests.

    python3 -m bench profile /validate                 # pyinstrument call tree (the bench extra)
    python3 -m bench profile /mutate --payload large-job
    python3 -m bench profile /convert --cprofile       # cProfile: exact call counts, sorted by own time

The HTTP server (gunicorn, TLS) is left out; profile it live with
``py-spy record -o serve.svg --subprocesses --pid <gunicorn master pid>`` while ``python3 -m bench run``
drives it.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import payloads as bodies
from bench.cluster import populate, target_namespace
from bench.payloads import Payload
from policies.cluster_view import StaticClusterView
from webhook import audit, create_app
from webhook.bootstrap import ServeOptions, observe
from webhook.runtime import default_runtime

ROOT = Path(__file__).resolve().parent.parent


class _Objects:
    """Collects what ``populate`` would give the API server."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def apply(self, *objects: dict[str, Any]) -> None:
        self.items += objects


def cluster_view(namespaces: int = 1) -> tuple[StaticClusterView, str]:
    """The benchmark cluster's state, as the watch caches hold it."""
    objects = _Objects()
    populate(objects, namespaces)  # type: ignore[arg-type]
    target = target_namespace(namespaces)

    def of(kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [o for o in objects.items if o["kind"] == kind
                and (namespace is None or o["metadata"].get("namespace") == namespace)]

    view = StaticClusterView(
        quotas={target: tuple(of("ResourceQuota", target))}, ranges={target: tuple(of("LimitRange", target))},
        namespaces={o["metadata"]["name"]: o for o in of("Namespace")}, node_list=tuple(of("Node")),
        queues={target: tuple(of("LocalQueue", target))}, jobs={target: tuple(of("MPIJob", target))},
        cluster_runtimes={o["metadata"]["name"]: o for o in of("ClusterTrainingRuntime")})
    return view, target


def payloads_for(endpoint: str, namespace: str, name: str | None) -> list[Payload]:
    if endpoint == "/convert":
        found = bodies.single_conversions(namespace) + [bodies.relist_conversion(namespace)]
        default = [p for p in found if p.objects == 1]
    else:
        found = bodies.admission_payloads(endpoint, namespace) + bodies.trainjob_payloads(endpoint, namespace) + \
            bodies.mpijob_twin_payloads(endpoint, namespace)
        default = [p for p in found if p.name != "large-job" and not p.name.startswith(("trainjob-", "mpijob-twin-"))]
    if name is None:
        return default
    chosen = [p for p in found if p.name == name]
    if not chosen:
        raise SystemExit(f"no payload {name!r} for {endpoint}; choose from: {', '.join(p.name for p in found)}")
    return chosen


def app_client(view: StaticClusterView) -> Any:
    """The app as ``serve`` builds it in each worker (policy file, audit log, metrics)."""
    runtime = default_runtime(cluster=view)
    observe(runtime, ServeOptions(policy_file=ROOT / "examples" / "policy.yaml"))
    return create_app(runtime).test_client()


def post_all(client: Any, load: list[Payload], requests: int) -> Callable[[], None]:
    def run() -> None:
        for i in range(requests):
            payload = load[i % len(load)]
            answer = client.post(payload.path, data=payload.body, content_type="application/json")
            if answer.status_code != 200:
                raise SystemExit(f"{payload.name}: HTTP {answer.status_code}: {answer.data[:300]!r}")
    return run


@contextmanager
def audit_log_silenced() -> Iterator[None]:
    """The app's audit log goes to stdout: out of the way of what a command prints."""
    saved, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115
    try:
        yield
    finally:
        audit.flush()  # lines still pending for the stand-in: written before it is closed, not at exit
        sys.stdout.close()
        sys.stdout = saved


def chosen_endpoints(parser: argparse.ArgumentParser, given: Sequence[str], allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The endpoints named on the command line (all of ``allowed`` when none is), or the usage error."""
    unknown = [endpoint for endpoint in given if endpoint not in allowed]
    if unknown:
        parser.error(f"unknown endpoint {unknown[0]}; choose from {', '.join(allowed)}")
    return tuple(given) or allowed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench profile", description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("endpoint", choices=("/validate", "/mutate", "/convert"))
    parser.add_argument("--payload", help="one payload by name (default: the upstream examples / single-object reviews)")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--cprofile", action="store_true", help="cProfile instead of pyinstrument")
    args = parser.parse_args(argv)
    view, namespace = cluster_view()
    load = payloads_for(args.endpoint, namespace, args.payload)
    with audit_log_silenced():
        client = app_client(view)
        run = post_all(client, load, args.requests)
        post_all(client, load, 200)()  # warm up
        started = time.process_time()
        run()
        per_request = (time.process_time() - started) / args.requests * 1e6
        if args.cprofile:
            profiler = cProfile.Profile()
            profiler.runcall(run)
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
            report = text.getvalue()
        else:
            from pyinstrument import Profiler

            sampler = Profiler(interval=0.0002)
            sampler.start()
            run()
            sampler.stop()
            report = sampler.output_text(unicode=True, show_all=False)
    print(f"{args.endpoint} {', '.join(p.name for p in load)}: {per_request:.0f} µs CPU per request "
          f"(Flask test client included)")
    print(report)
    return 0
