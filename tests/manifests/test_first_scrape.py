"""A fresh server's first scrape, before any admission request: every series the Grafana
dashboard and the PrometheusRule read is already there (at 0 for the counters), with the label
values they select, so a new pod's panels draw and ``rate()``/``increase()`` see its first event."""
from __future__ import annotations

import re

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.manifests.build import MANIFESTS
from tests.manifests.test_dashboard import TARGET_LABELS, example_serve, expressions, grouping, selectors
from webhook import metrics

RULE_FILE = MANIFESTS / "overlays" / "monitoring" / "prometheusrule.yaml"
Labels = dict[str, str]
SAID = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}  # MatchOp's names, as PromQL writes them


def alert_expressions() -> list[tuple[str, str]]:
    document = yaml.safe_load(RULE_FILE.read_text())
    found = [(rule["alert"], rule["expr"]) for group in document["spec"]["groups"] for rule in group["rules"]]
    assert found, "the PrometheusRule has no alerts"
    return found


@pytest.fixture(scope="module")
def first_scrape(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Labels]]:
    """The series of a real ``serve`` (gunicorn, TLS, multi-process metrics, a cluster and the
    example policy file) scraped on its health port once it is ready and before any request:
    name -> the label sets of its samples."""
    with example_serve(tmp_path_factory.mktemp("first-scrape"), workers=2) as server:
        status, body = server.health_request("/metrics")
        assert status == 200
    series: dict[str, list[Labels]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            series.setdefault(sample.name, []).append(dict(sample.labels))
    return series


def _matches(labels: Labels, matcher: object) -> bool:
    value = labels.get(matcher.name, "")  # type: ignore[attr-defined]
    op, wanted = matcher.op, matcher.value  # type: ignore[attr-defined]
    if op == promql_parser.MatchOp.Equal:
        return value == wanted
    if op == promql_parser.MatchOp.NotEqual:
        return value != wanted
    found = re.fullmatch(wanted, value) is not None  # PromQL regexes are anchored
    return found if op == promql_parser.MatchOp.Re else not found


@pytest.mark.parametrize(("title", "expr"), [*expressions(), *alert_expressions()])
def test_every_queried_series_is_on_the_first_scrape(first_scrape: dict[str, list[Labels]], title: str,
                                                    expr: str) -> None:
    ours = [s for s in selectors(expr) if s.name.startswith(metrics.PREFIX)]  # not Prometheus' own `up`
    for selector in ours:
        samples = first_scrape.get(selector.name, [])
        wanted = [m for m in selector.matchers.matchers if m.name not in TARGET_LABELS]
        matching = [labels for labels in samples if all(_matches(labels, m) for m in wanted)]
        said = ", ".join(f"{m.name}{SAID[str(m.op).split('.')[-1]]}{m.value!r}" for m in wanted)
        assert matching, f"{title}: no {selector.name}{{{said}}} on a fresh server's first scrape"
        missing = grouping(expr) - TARGET_LABELS - {"le"} - set().union(*matching)
        assert not missing, f"{title}: {selector.name} has no label {sorted(missing)} on the first scrape"


def test_counters_start_at_zero_for_every_known_label_value(first_scrape: dict[str, list[Labels]]) -> None:
    """Spot checks of the label values no query names: each rule, each mutation, each reload result."""
    from policies.registry import MUTATION_IDS, RULE_IDS

    findings = {(s["rule"], s["action"], s["dry_run"]) for s in first_scrape[f"{metrics.PREFIX}_findings_total"]}
    assert {(rule, action, flag) for rule in RULE_IDS for action in ("deny", "warn", "audit")
            for flag in ("true", "false")} <= findings
    assert {s["mutation"] for s in first_scrape[f"{metrics.PREFIX}_mutations_total"]} == set(MUTATION_IDS)
    assert {s["result"] for s in first_scrape[f"{metrics.PREFIX}_policy_reloads_total"]} == {
        "success", "invalid", "missing"}
    requests = {tuple(s[k] for k in ("endpoint", "operation", "decision", "dry_run"))
                for s in first_scrape[f"{metrics.PREFIX}_requests_total"]}
    assert ("validate", "UPDATE", "error", "false") in requests and ("mutate", "CREATE", "denied", "true") in requests
