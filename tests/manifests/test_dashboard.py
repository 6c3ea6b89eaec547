"""The Grafana dashboard: every PromQL expression parses (promql-parser, the Rust parser of the
Prometheus grammar), names only series a real server exports on /metrics, with labels it (or
the scrape) gives them; the panels an admin asked for are there; and the monitoring overlays
ship the same file as the ConfigMaps Grafana and the OpenShift console pick up."""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import promql_parser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testing.builders import admission_review, mpijob
from testing.kube_api_server import KubeAPI
from tests.manifests.build import MANIFESTS, NAMESPACE, Object, find
from webhook import metrics

DASHBOARD_FILE = MANIFESTS / "overlays" / "monitoring" / "grafana-dashboard.json"
DASHBOARD = json.loads(DASHBOARD_FILE.read_text())
# Labels Prometheus puts on every series of a target found by the ServiceMonitor (the Prometheus
# Operator's target labels), on top of what the server exports.
TARGET_LABELS = {"job", "instance", "namespace", "service", "pod", "container", "endpoint"}
# The panels an admin asked for: title -> the metric it reads and the labels it groups by.
REQUIRED_PANELS = {
    "Requests by endpoint and decision": ("mpijob_webhook_requests_total", {"endpoint", "decision"}),
    "Latency p50 and p99 by endpoint": ("mpijob_webhook_request_duration_seconds_bucket", {"le", "endpoint"}),
    "Denials and warnings by rule": ("mpijob_webhook_findings_total", {"rule", "action"}),
    "Conversions by version pair and result": ("mpijob_webhook_conversions_total",
                                               {"from_version", "to_version", "result"}),
    "Policy reload status and last success": ("mpijob_webhook_policy_last_reload_successful", set()),
    "Cache sync age by kind": ("mpijob_webhook_cache_last_sync_age_seconds", {"cache"}),
    "Serving certificate expiry": ("mpijob_webhook_serving_certificate_expiration_timestamp_seconds", set()),
}


def panels(container: dict[str, Any] = DASHBOARD) -> Iterator[dict[str, Any]]:
    for panel in container.get("panels", []):
        yield panel
        yield from panels(panel)  # a collapsed row keeps its panels inside it


def expressions() -> list[tuple[str, str]]:
    found = [(panel["title"], target["expr"]) for panel in panels() for target in panel.get("targets", [])]
    assert found, "the dashboard has no queries"
    return found


def nodes(expr: str) -> list[Any]:
    seen: list[Any] = []
    promql_parser.walk(promql_parser.parse(expr), pre_visit=seen.append)
    return seen


def selectors(expr: str) -> list[Any]:
    return [node for node in nodes(expr) if isinstance(node, promql_parser.VectorSelector)]


def grouping(expr: str) -> set[str]:
    return {label for node in nodes(expr) if isinstance(node, promql_parser.AggregateExpr) and node.modifier
            for label in node.modifier.labels}


@pytest.mark.parametrize(("title", "expr"), expressions())
def test_every_expression_parses(title: str, expr: str) -> None:
    promql_parser.parse(expr)  # raises ValueError with the reason, also on type errors
    # No template variables: the OpenShift console and a plain import run the queries as written.
    assert "$" not in expr, title
    assert selectors(expr), f"{title}: reads no series"
    for selector in selectors(expr):
        assert {m.name: m.value for m in selector.matchers.matchers}.get("job") == "mpijob-webhook", \
            f"{title}: {selector.name} is not limited to the webhook's job, as the alerts are"


def test_the_parser_refuses_what_prometheus_refuses() -> None:
    for broken in ("sum(rate(mpijob_webhook_requests_total[5m])", "rate(mpijob_webhook_requests_total)",
                   "histogram_quantil(0.99, x)", 'sum by (endpoint (x)'):
        with pytest.raises(ValueError):
            promql_parser.parse(broken)


def test_the_asked_for_panels_are_there() -> None:
    by_title = {panel["title"]: panel for panel in panels()}
    for title, (metric, labels) in REQUIRED_PANELS.items():
        exprs = [target["expr"] for target in by_title[title]["targets"]]
        assert any(metric in {s.name for s in selectors(e)} and labels <= grouping(e) for e in exprs), title
    latency = [t["expr"] for t in by_title["Latency p50 and p99 by endpoint"]["targets"]]
    quantiles = {node.args[0].val for e in latency for node in nodes(e)
                 if isinstance(node, promql_parser.Call) and node.func.name == "histogram_quantile"}
    assert quantiles == {0.5, 0.99}
    reloads = [t["expr"] for t in by_title["Policy reload status and last success"]["targets"]]
    assert {s.name for e in reloads for s in selectors(e)} == {
        "mpijob_webhook_policy_last_reload_successful", "mpijob_webhook_policy_last_reload_success_timestamp_seconds"}
    (denials,) = by_title["Denials and warnings by rule"]["targets"]
    (findings,) = selectors(denials["expr"])
    assert {(m.name, m.value) for m in findings.matchers.matchers} >= {("action", "deny|warn")}


def test_panels_are_ones_the_openshift_console_draws() -> None:
    # The console draws graph, singlestat, gauge, table and row panels; Grafana migrates the
    # first two to timeseries and stat when it loads the dashboard.
    assert {panel["type"] for panel in panels()} <= {"row", "graph", "singlestat"}
    assert all(panel["datasource"] == "$datasource" for panel in panels() if panel["type"] != "row")
    (variable,) = DASHBOARD["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids))


def test_panels_fit_the_grid_without_overlapping() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in panels():
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


# --- against a live server ------------------------------------------------------------------

@pytest.fixture(scope="module")
def live_metrics(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """The series of a real ``serve`` (gunicorn, TLS, multi-process metrics) reading a cluster and
    a policy file, after one request of each kind: name -> the label names it carries."""
    with example_serve(tmp_path_factory.mktemp("dashboard"), workers=1) as server:
        denied = server.review("/validate", admission_review(mpijob(workers=1, slots=9)))
        assert denied["allowed"] is False
        mutated = server.review("/mutate", admission_review(mpijob()))
        assert mutated["patchType"] == "JSONPatch"
        status, converted = server.post_json("/convert", {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "1", "desiredAPIVersion": "kubeflow.org/v1alpha2", "objects": [mpijob()]}})
        assert status == 200 and converted["response"]["result"]["status"] == "Success"
        status, _ = server.request("POST", "/validate", b"{not json", {"Content-Type": "application/json"})
        assert status == 400
        status, body = server.health_request("/metrics")  # the plain health port, as Prometheus scrapes
        assert status == 200
    exported: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
    return exported


@contextmanager
def example_serve(directory: Path, *, workers: int) -> Iterator[Any]:
    """A real ``serve`` (gunicorn, TLS, multi-process metrics) reading an in-test cluster and the
    example policy file, ready, without an audit log."""
    from testing.tls_server import serving

    with KubeAPI() as api:
        kubeconfig = api.kubeconfig(directory / "kubeconfig")
        policy = Path(__file__).resolve().parents[2] / "examples" / "policy.yaml"
        with serving(directory / "server", "--dev", "--kubeconfig", str(kubeconfig), "--policy-file", str(policy),
                     "--workers", str(workers), "--threads", "4", "--no-audit-log") as server:
            wait_until_ready(server)
            yield server


def wait_until_ready(server: Any) -> None:
    import time

    deadline = time.monotonic() + 20
    while server.request("GET", "/readyz")[0] != 200:
        assert time.monotonic() < deadline, server.request("GET", "/readyz")
        time.sleep(0.1)


def test_the_live_server_exports_every_metric_of_its_module(live_metrics: dict[str, set[str]]) -> None:
    """The comparison below is only worth something if every metric has samples by then."""
    names = {name for name in live_metrics if name.startswith(metrics.PREFIX)}
    assert {f"{metrics.PREFIX}_{suffix}" for suffix in (
        "requests_total", "request_duration_seconds_bucket", "findings_total", "mutations_total",
        "bad_requests_total", "conversions_total", "policy_reloads_total", "policy_last_reload_successful",
        "policy_last_reload_success_timestamp_seconds", "cache_last_sync_timestamp_seconds",
        "cache_last_sync_age_seconds", "serving_certificate_expiration_timestamp_seconds")} <= names


@pytest.mark.parametrize(("title", "expr"), expressions())
def test_every_series_is_exported_by_the_server(live_metrics: dict[str, set[str]], title: str, expr: str) -> None:
    for selector in selectors(expr):
        assert selector.name in live_metrics, f"{title}: {selector.name} is not on a live /metrics"
        labels = live_metrics[selector.name] | TARGET_LABELS
        matched = {m.name for m in selector.matchers.matchers}
        assert matched <= labels, f"{title}: {selector.name} has no label {sorted(matched - labels)}"
    available = set().union(*(live_metrics[s.name] for s in selectors(expr))) | TARGET_LABELS
    assert grouping(expr) <= available, f"{title}: groups by {sorted(grouping(expr) - available)}"


# --- the overlays ---------------------------------------------------------------------------

def dashboard_config_map(objects: list[Object], name: str, namespace: str) -> Object:
    config_map = find([o for o in objects if o["metadata"].get("namespace") == namespace], "ConfigMap", name)
    (text,) = config_map["data"].values()
    assert json.loads(text) == DASHBOARD  # the same file, unchanged
    return config_map


def test_monitoring_ships_the_dashboard_for_grafana(overlays: dict[str, list[Object]]) -> None:
    config_map = dashboard_config_map(overlays["monitoring"], "mpijob-webhook-grafana-dashboard", NAMESPACE)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"  # the Grafana sidecar's label
    assert list(config_map["data"]) == ["mpijob-webhook.json"]  # the sidecar takes *.json keys as files


def test_monitoring_openshift_adds_the_console_dashboard(overlays: dict[str, list[Object]]) -> None:
    objects = overlays["monitoring-openshift"]
    config_map = dashboard_config_map(objects, "mpijob-webhook-dashboard", "openshift-config-managed")
    assert config_map["metadata"]["labels"]["console.openshift.io/dashboard"] == "true"
    rest = [o for o in objects if o is not config_map]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in rest) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in overlays["monitoring"])


def test_the_webhooks_endpoint_label_survives_the_scrape(overlays: dict[str, list[Object]]) -> None:
    """The Prometheus Operator labels each target endpoint=<port name>; with honor_labels false,
    Prometheus renames the scraped endpoint label exported_endpoint, then applies the metric
    relabelings. Replayed here on one series of each kind."""
    (endpoint,) = find(overlays["monitoring"], "ServiceMonitor", "mpijob-webhook")["spec"]["endpoints"]
    target = {"job": "mpijob-webhook", "endpoint": endpoint["port"], "pod": "mpijob-webhook-0"}
    assert scrape({"endpoint": "validate", "decision": "allowed"}, target, endpoint)["endpoint"] == "validate"
    assert scrape({"cache": "nodes"}, target, endpoint)["endpoint"] == endpoint["port"]
    assert "exported_endpoint" not in scrape({"endpoint": "mutate"}, target, endpoint)


def scrape(exported: dict[str, str], target: dict[str, str], endpoint: dict[str, Any]) -> dict[str, str]:
    import re

    labels = {(f"exported_{k}" if k in target else k): v for k, v in exported.items()} | target
    for rule in endpoint.get("metricRelabelings", []):
        action = rule.get("action", "replace")
        if action == "replace":
            value = ";".join(labels.get(s, "") for s in rule["sourceLabels"])
            match = re.fullmatch(rule.get("regex", "(.*)"), value)
            if match:
                labels[rule["targetLabel"]] = match.expand(rule.get("replacement", "$1").replace("$", "\\"))
        elif action == "labeldrop":
            labels = {k: v for k, v in labels.items() if not re.fullmatch(rule["regex"], k)}
        else:
            raise AssertionError(f"relabel action {action} not replayed here")
    return labels

