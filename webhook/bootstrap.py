"""Wires one server process together from the serve options: policy, cluster view, runtime.

Called once per gunicorn worker (after fork), so every process owns its own state."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from policies.conversion import DEFAULT_GPUS_PER_NODE, ConversionOptions
from webhook import client_auth, metrics, policy_reload, watch_caches
from webhook.audit import AuditLog
from webhook.body_budget import DEFAULT_CAPACITY, MiB, BodyBudget
from webhook.audit import flush as flush_audit_log
from webhook.client_auth import ClientAuthentication
from webhook.connections import DEFAULT_CLIENT_SECONDS, DEFAULT_MAX_PENDING
from webhook.conversion_review import hub_converter
from webhook.runtime import Runtime, default_runtime


@dataclass(frozen=True)
class ServeOptions:
    host: str = "0.0.0.0"
    port: int = 8443
    cert_file: Path | None = None
    key_file: Path | None = None
    dev: bool = False
    # One process: each worker keeps its own watch caches (memory, API server watches), and the
    # GIL lets one process use one core, the Deployment's CPU limit. See docs/performance.md.
    workers: int = 1
    threads: int = 8
    # How long a client may take to send one request (see webhook.connections).
    client_timeout: float = DEFAULT_CLIENT_SECONDS
    # Connections still in their TLS handshake or first request head, per worker (the oldest
    # goes when a new one would pass it).
    max_pending_connections: int = DEFAULT_MAX_PENDING
    # Plain HTTP: /healthz, /readyz and /metrics for the kubelet and Prometheus.
    health_port: int = 8081
    # Admission and conversion only for clients with a certificate from this CA (and, if any are
    # given, naming one of client_names): see webhook.client_auth.
    client_ca_file: Path | None = None
    client_names: tuple[str, ...] = ()
    client_auth_paths: frozenset[str] = client_auth.DEFAULT_PATHS
    # The admin's policy file (None: the built-in defaults), and how often it is checked for edits.
    policy_file: Path | None = None
    policy_check_seconds: float = 2.0
    audit_log: bool = True
    # Where cluster state comes from: this kubeconfig, else the pod's ServiceAccount (not with --dev).
    kubeconfig: Path | None = None
    # How long a cache cut off from the API server is trusted, and how often a CRD not installed
    # is looked for again (docs/cluster-checks.md).
    cluster_timing: watch_caches.Timing = watch_caches.Timing()
    # Per-node capacity for v1alpha1 jobs sized by gpus/processingUnits that do not give it.
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    # Memory the request bodies of one worker may take at once (webhook.body_budget).
    body_memory_mib: int = DEFAULT_CAPACITY // MiB


def build_runtime(options: ServeOptions) -> Runtime:
    cluster = watch_caches.connect(options.kubeconfig, dev=options.dev, timing=options.cluster_timing,
                                   on_sync=metrics.record_cache_sync)
    runtime = default_runtime(cluster=cluster.mpijobs)
    runtime.admission.trainjob_cluster = cluster.trainjobs
    runtime.body_budget = body_budget(options)
    configure_conversion(runtime, ConversionOptions(gpus_per_node=options.gpus_per_node))
    if cluster.readiness is not None:
        runtime.readiness_checks["cluster"] = cluster.readiness
    if options.client_ca_file is not None:
        runtime.client_auth = ClientAuthentication(options.client_ca_file, frozenset(options.client_names),
                                                   options.client_auth_paths)
    observe(runtime, options)
    return runtime


# Of the client timeout, what a body that waited for room keeps for arriving: the deadline for
# the whole request (webhook.connections) keeps running while it waits.
BODY_READ_SECONDS = 2.0


def body_budget(options: ServeOptions) -> BodyBudget:
    """The budget of one worker: at most half its threads wait for room (the others serve
    everyone else), each for no longer than leaves its body time to arrive; small bodies are
    charged their worst case whole while every thread holding one takes at most half of it."""
    return BodyBudget(options.body_memory_mib * MiB, threads=options.threads, max_waiting=max(1, options.threads // 2),
                      max_wait=max(options.client_timeout - BODY_READ_SECONDS, options.client_timeout / 2))


def observe(runtime: Runtime, options: ServeOptions) -> None:
    """Policy file (watched), audit log, metrics: the admin's view of one worker process."""
    policy_reload.attach(runtime, options.policy_file, options.policy_check_seconds)
    runtime.admission.observers.append(metrics.observe_decision)
    runtime.conversion.observers.append(metrics.record_conversion)
    if options.audit_log:
        audit_log = AuditLog()
        runtime.admission.observers.append(audit_log)
        client_auth.observe_refusals(audit_log.refused)
    else:
        client_auth.observe_refusals(None)
    if options.cert_file is not None:
        metrics.set_certificate_expiry(options.cert_file)


def flush_observers(server: object = None, worker: object = None) -> None:
    """gunicorn ``worker_exit`` hook: the metrics and audit lines a worker still holds in memory
    are written before it leaves (the interpreter's exit writes anything later)."""
    metrics.flush()
    flush_audit_log()


def configure_conversion(runtime: Runtime, options: ConversionOptions) -> None:
    """/convert and /validate convert older MPIJobs the same way."""
    runtime.conversion.options = options
    runtime.admission.to_hub = hub_converter(options)
