"""The cluster the benchmarked webhook reads: the in-test Kubernetes API server
(``testing.kube_api_server``, the real list/watch protocol) in its own process, filled with N namespaces
that each have a ResourceQuota, a LimitRange and a Kueue LocalQueue, plus nodes and running MPIJobs.

It counts what the webhook asks of it, so the report can show the number of watch connections
one replica opens and that answering requests never calls the API server.
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.payloads import trainer_runtimes
from testing.child_processes import die_with_parent
from testing.kube_api_server import CORE, MPIJOBS, TRAINER, KubeAPI, local_queues
from testing.kube_objects import (container_limits, limit_range, local_queue, namespace, node, resource_quota,
                                stored_mpijob)

GPU = "requests.nvidia.com/gpu"
# Labels some namespaces carry, so the policy file's namespaceSelector overrides apply.
RESEARCH = {"team": "research"}
PRODUCTION = {"environment": "production"}


@dataclass(frozen=True)
class Counts:
    lists: int  # requests other than watches (lists, gets) answered so far
    watches: int  # watch requests answered so far


class CountingKubeAPI(KubeAPI):
    """KubeAPI that sums up its per-path request counts."""

    def counts(self) -> Counts:
        with self._cond:
            lists = sum(n for key, n in self.requests.items() if key.startswith("LIST"))
            watches = sum(n for key, n in self.requests.items() if key.startswith("WATCH"))
            return Counts(lists, watches)


def namespace_name(index: int) -> str:
    return f"team-{index:05d}"


def target_namespace(namespaces: int) -> str:
    """The namespace requests go to: one in the middle, so no lookup is lucky."""
    return namespace_name(namespaces // 2)


def populate(api: KubeAPI, namespaces: int) -> None:
    """``namespaces`` namespaces, each with a quota, a LimitRange and a LocalQueue; one in ten is a
    research namespace, one in ten a production one; 16 GPU nodes; 5 running jobs next to the
    requests' namespace; the MPI ClusterTrainingRuntimes the TrainJob payloads name."""
    objects: list[dict[str, Any]] = [
        node(f"gpu-{i}", {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"})
        for i in range(16)]
    target = target_namespace(namespaces)
    for i in range(namespaces):
        name = namespace_name(i)
        labels = RESEARCH if i % 10 == 0 or name == target else PRODUCTION if i % 10 == 1 else {}
        objects += [
            namespace(name, labels),
            resource_quota("compute", {GPU: 512, "requests.cpu": 2048, "requests.memory": "8Ti", "pods": 500},
                           {GPU: 8, "requests.cpu": 16, "requests.memory": "64Gi", "pods": 10}, namespace=name),
            limit_range("defaults", container_limits(default={"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "0"},
                                                     max={"nvidia.com/gpu": "8"}), namespace=name),
            local_queue("default", namespace=name),
        ]
    objects += [stored_mpijob(f"running-{j}", namespace=target, conditions=[("Created", "True"), ("Running", "True")])
                for j in range(5)]
    objects += trainer_runtimes()
    api.apply(*objects)


def _serve(namespaces: int, kubeconfig: Path, commands: Connection, cpus: set[int] | None,
           arm: Callable[[], None]) -> None:
    arm()  # gone with the benchmark, even when it is killed
    if cpus:
        os.sched_setaffinity(0, cpus)
    with CountingKubeAPI((*CORE, MPIJOBS, local_queues(), *TRAINER), history=1000) as api:
        populate(api, namespaces)
        api.kubeconfig(kubeconfig)
        commands.send("ready")
        while True:
            command = commands.recv()
            if command == "counts":
                commands.send(api.counts())
            else:
                break


class Cluster:
    """``with Cluster(namespaces, kubeconfig) as cluster:`` the API server runs in a child process."""

    def __init__(self, namespaces: int, kubeconfig: Path, cpus: set[int] | None = None) -> None:
        self.namespaces = namespaces
        self.kubeconfig = kubeconfig
        self.target = target_namespace(namespaces)
        self._ours, theirs = multiprocessing.Pipe()
        # fork: the child needs nothing but this module, and starts at once
        self._process = multiprocessing.get_context("fork").Process(
            target=_serve, args=(namespaces, kubeconfig, theirs, cpus, die_with_parent()), daemon=True)

    def __enter__(self) -> Cluster:
        self._process.start()
        if not self._ours.poll(600) or self._ours.recv() != "ready":
            raise RuntimeError(f"the API server with {self.namespaces} namespaces did not start")
        return self

    def counts(self) -> Counts:
        self._ours.send("counts")
        return self._ours.recv()

    def __exit__(self, *exc: object) -> None:
        try:
            self._ours.send("stop")
        except OSError:
            pass
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
