"""Does /validate get slower as the cluster grows? It should not: the caches are indexed by
namespace, so a request touches only its own namespace's quotas and LimitRanges.

Serves N namespaces (each with a ResourceQuota and a LimitRange) from the in-test Kubernetes API
server, fills the webhook's watch caches from it with the real client, then times /validate
requests (in-process, through Flask) of a job whose namespace has a quota, a LimitRange and a few
other MPIJobs. Prints per-size latency and the ratio of the largest size to the smallest.

    python3 -m bench.namespace_scaling                     # 1 vs 10,000 namespaces
    python3 -m bench.namespace_scaling --sizes 1 1000 10000 --requests 3000

Not part of the test run.
"""
from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from tests.builders import admission_review
from tests.kube_api import KubeAPI
from tests.kube_objects import container_limits, gpu_job, limit_range, namespace, node, resource_quota, stored_mpijob
from webhook import create_app
from webhook.cluster import ClusterCaches, api_client
from webhook.runtime import default_runtime

GPU = "requests.nvidia.com/gpu"


def populate(api: KubeAPI, namespaces: int) -> str:
    """N namespaces with a quota and a LimitRange each; returns the namespace the job goes to."""
    objects = [node(f"gpu-{i}", {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"})
               for i in range(16)]
    for i in range(namespaces):
        name = f"team-{i:05d}"
        objects += [
            namespace(name),
            resource_quota("compute", {GPU: 64, "requests.cpu": 512, "pods": 200}, {GPU: 8, "pods": 10},
                           namespace=name),
            limit_range("defaults", container_limits(default={"cpu": "1", "memory": "2Gi"}, max={"nvidia.com/gpu": "8"}),
                        namespace=name),
        ]
    target = f"team-{namespaces // 2:05d}"
    objects += [stored_mpijob(f"running-{j}", namespace=target, conditions=[("Created", "True"), ("Running", "True")])
                for j in range(5)]
    api.apply(*objects)
    return target


def serve_cluster(namespaces: int, kubeconfig: Path, ready: Connection) -> None:
    """The API server in its own process, so its objects do not weigh on the measured one."""
    with KubeAPI(history=100) as api:
        target = populate(api, namespaces)
        api.kubeconfig(kubeconfig)
        ready.send(target)
        ready.recv()  # until the measurement is done


def measure(namespaces: int, requests: int, workdir: Path) -> tuple[float, list[float]]:
    kubeconfig = workdir / f"kubeconfig-{namespaces}"
    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.get_context("fork").Process(target=serve_cluster, args=(namespaces, kubeconfig, theirs))
    server.start()
    try:
        target = ours.recv()
        started = time.perf_counter()
        caches = ClusterCaches(api_client(kubeconfig)).start()
        try:
            if not caches.wait_synced(300):
                sys.exit(f"caches did not sync: {caches.readiness()[1]}")
            sync_seconds = time.perf_counter() - started
            client = create_app(default_runtime(cluster=caches)).test_client()
            review = admission_review(gpu_job(workers=4, namespace=target), namespace=target)
            for _ in range(min(200, requests)):  # warm up
                client.post("/validate", json=review)
            latencies = []
            for _ in range(requests):
                begin = time.perf_counter()
                answer = client.post("/validate", json=review)
                latencies.append(time.perf_counter() - begin)
            body = answer.get_json()["response"]
            assert body["allowed"], body
            return sync_seconds, latencies
        finally:
            caches.stop()
    finally:
        ours.send("done")
        server.join(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10_000], help="namespace counts to compare")
    parser.add_argument("--requests", type=int, default=2000, help="timed /validate requests per size and round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="sizes are measured in turn this many times; the best round of each counts, "
                             "so a busy machine does not decide the ratio (default %(default)s)")
    args = parser.parse_args(argv)
    best: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="namespace-scaling-") as tmp:
        for round_number in range(1, args.rounds + 1):
            for size in args.sizes:
                sync, latencies = measure(size, args.requests, Path(tmp))
                median, p99 = statistics.median(latencies), statistics.quantiles(latencies, n=100)[98]
                print(f"round {round_number}: {size:>6} namespaces: caches synced in {sync:6.2f} s; /validate "
                      f"median {median * 1000:6.3f} ms, p99 {p99 * 1000:6.3f} ms", flush=True)
                previous = best.get(size, (float("inf"), float("inf")))
                best[size] = (min(previous[0], median), min(previous[1], p99))
    smallest, largest = min(best), max(best)
    ratio = best[largest][0] / best[smallest][0]
    p99_ratio = best[largest][1] / best[smallest][1]
    print(f"latency ratio {largest} / {smallest} namespaces (best of {args.rounds} rounds): median {ratio:.2f}x, "
          f"p99 {p99_ratio:.2f}x ({'flat' if ratio < 1.25 else 'GROWS'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
