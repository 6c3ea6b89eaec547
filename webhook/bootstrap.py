"""Wires one server process together from the serve options: policy, cluster view, runtime.

Called once per gunicorn worker (after fork), so every process owns its own state."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from policies.conversion import DEFAULT_GPUS_PER_NODE, ConversionOptions
from webhook import metrics, policy_reload, watch_caches
from webhook.audit import AuditLog
from webhook.audit import flush as flush_audit_log
from webhook.connections import DEFAULT_CLIENT_SECONDS
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
    # The admin's policy file (None: the built-in defaults), and how often it is checked for edits.
    policy_file: Path | None = None
    policy_check_seconds: float = 2.0
    audit_log: bool = True
    # Where cluster state comes from: this kubeconfig, else the pod's ServiceAccount (not with --dev).
    kubeconfig: Path | None = None
    # Per-node capacity for v1alpha1 jobs sized by gpus/processingUnits that do not give it.
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE


def build_runtime(options: ServeOptions) -> Runtime:
    view, readiness = watch_caches.connect(options.kubeconfig, dev=options.dev, on_sync=metrics.record_cache_sync)
    runtime = default_runtime(cluster=view)
    configure_conversion(runtime, ConversionOptions(gpus_per_node=options.gpus_per_node))
    if readiness is not None:
        runtime.readiness_checks["cluster"] = readiness
    observe(runtime, options)
    return runtime


def observe(runtime: Runtime, options: ServeOptions) -> None:
    """Policy file (watched), audit log, metrics: the admin's view of one worker process."""
    policy_reload.attach(runtime, options.policy_file, options.policy_check_seconds)
    runtime.admission.observers.append(metrics.observe_decision)
    runtime.conversion.observers.append(metrics.record_conversion)
    if options.audit_log:
        runtime.admission.observers.append(AuditLog())
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
