"""The monitoring overlay scrapes what the server serves, and alerts on metrics that exist."""
from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.manifests.build import INSTALL_OVERLAYS, SERVICE, Object, find
from webhook import create_app, metrics

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
REQUIRED_ALERTS = {
    "MPIJobWebhookDown", "MPIJobWebhookSlow", "MPIJobWebhookErrors", "MPIJobWebhookCertificateExpiringSoon",
    "MPIJobWebhookPolicyReloadFailing", "MPIJobWebhookCachesNotSynced",
}


def alerts(objects: list[Object]) -> dict[str, dict]:
    rule = find(objects, "PrometheusRule", "mpijob-webhook")
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def exposed_series() -> set[str]:
    body, _ = metrics.exposition()
    names = set()
    for family in text_string_to_metric_families(body.decode()):
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


@pytest.mark.parametrize("overlay", INSTALL_OVERLAYS)
def test_service_monitor_scrapes_the_webhook_service(overlays: dict[str, list[Object]], overlay: str) -> None:
    monitor = find(overlays["monitoring"], "ServiceMonitor", "mpijob-webhook")["spec"]
    service = find(overlays[overlay], "Service", SERVICE)
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["selector"]["matchLabels"].items())
    assert monitor["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = monitor["endpoints"]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    # The plain health port: Prometheus presents no client certificate (serve --client-ca-file).
    assert port["targetPort"] == "health"
    assert endpoint["scheme"] == "http" and "tlsConfig" not in endpoint


def test_metrics_path_is_a_route_of_the_server(overlays: dict[str, list[Object]]) -> None:
    (endpoint,) = find(overlays["monitoring"], "ServiceMonitor", "mpijob-webhook")["spec"]["endpoints"]
    routes = {rule.rule: rule.methods for rule in create_app().url_map.iter_rules()}
    assert "GET" in routes[endpoint["path"]]


def test_required_alerts_exist(overlays: dict[str, list[Object]]) -> None:
    found = alerts(overlays["monitoring"])
    assert REQUIRED_ALERTS <= set(found)
    for rule in found.values():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]


def test_alert_thresholds(overlays: dict[str, list[Object]]) -> None:
    found = alerts(overlays["monitoring"])
    slow = found["MPIJobWebhookSlow"]
    assert "histogram_quantile(0.99" in slow["expr"] and re.search(r"\)\s*>\s*1\s*$", slow["expr"].strip())
    assert slow["for"] == "5m"
    assert "< 15 * 24 * 3600" in found["MPIJobWebhookCertificateExpiringSoon"]["expr"]


def test_every_metric_in_the_alerts_is_exposed_by_the_server(overlays: dict[str, list[Object]]) -> None:
    exposed = exposed_series()
    used = {name for rule in alerts(overlays["monitoring"]).values()
            for name in re.findall(rf"\b{metrics.PREFIX}_[a-z_]+", rule["expr"])}
    assert used, "the alerts use none of the server's metrics"
    assert used <= exposed, f"not exposed: {sorted(used - exposed)}"


def test_monitoring_openshift_scrapes_as_the_plain_overlay_does(overlays: dict[str, list[Object]]) -> None:
    """/metrics is plain HTTP on the health port: no CA to check it against, so OpenShift needs
    no service-CA patch of the scrape (its serving Secret has no ca.crt)."""
    (endpoint,) = find(overlays["monitoring-openshift"], "ServiceMonitor", "mpijob-webhook")["spec"]["endpoints"]
    plain = find(overlays["monitoring"], "ServiceMonitor", "mpijob-webhook")
    assert endpoint == plain["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "http" and "tlsConfig" not in endpoint
