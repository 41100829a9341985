"""The endpoint picker observed: its PodMonitors scrape ports its pods declare, the fail-open
alert passes promtool and fires on fall-back traffic only, and the dashboard row reads only
metrics the pinned releases emit."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from eks_inference import names
from eks_inference.charts.render import render_platform
from eks_inference.metrics import metric_names, unknown_metrics
from eks_inference.observability import routing as routing_observed
from eks_inference.observability.dashboards import dashboard, expressions
from eks_inference.observability.signals import DEPLOYMENT_LABEL
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.objects import crd_validator, one, schema_errors
from tests.helpers.observed import (
    PODMONITOR_CRD,
    PROMETHEUSRULE_CRD,
    PROMTOOL,
    PROMTOOL_MISSING,
    pods,
    promtool_check_rules,
    promtool_test_rules,
    selects,
)
from tests.helpers.platforms import EXAMPLES_DIR
from tests.helpers.rendered import CONTEXT

EXAMPLE = PlatformSpec.from_yaml(EXAMPLES_DIR / "prefix-routing.yaml")
(SPEC,) = EXAMPLE.deployments
ALERT = "InferencePickerFailingOpen"
SCRAPE = 15


@cache
def _objects() -> list[dict[str, Any]]:
    return render_platform(EXAMPLE, CONTEXT)[SPEC.name]


def _rule_groups() -> list[dict[str, Any]]:
    rule = one(_objects(), "PrometheusRule")
    assert schema_errors(crd_validator(PROMETHEUSRULE_CRD, "v1"), rule) == []
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def test_the_picker_and_the_proxy_are_scraped_on_ports_their_pods_declare() -> None:
    monitors = {o["metadata"]["name"]: o for o in _objects() if o["kind"] == "PodMonitor"}
    expected = {f"{SPEC.name}-picker": "/metrics", f"{SPEC.name}-proxy": "/stats/prometheus"}
    for name, path in expected.items():
        monitor = monitors[name]
        assert schema_errors(crd_validator(PODMONITOR_CRD, "v1"), monitor) == []
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["path"] == path
        (pod,) = [p for p in pods(_objects()) if selects(monitor["spec"]["selector"], p.labels)]
        assert endpoint["port"] in pod.port_names


def test_the_alert_reads_the_proxys_fall_back_counter() -> None:
    (alert,) = [r for g in _rule_groups() for r in g["rules"] if r.get("alert") == ALERT]
    assert not unknown_metrics(alert["expr"])
    assert metric_names(alert["expr"]) == {"envoy_cluster_upstream_rq_total"}
    assert names.FALLBACK_CLUSTER in alert["expr"]
    assert alert["labels"][DEPLOYMENT_LABEL] == SPEC.name


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_the_rules_pass_promtool(tmp_path: Path) -> None:
    result = promtool_check_rules(_rule_groups(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _series(cluster: str, values: str) -> dict[str, str]:
    labels = f'{DEPLOYMENT_LABEL}="{SPEC.name}", envoy_cluster_name="{cluster}"'
    return {"series": f"envoy_cluster_upstream_rq_total{{{labels}}}", "values": values}


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_fall_back_traffic_fires_the_alert_and_picked_traffic_does_not(tmp_path: Path) -> None:
    """Twenty minutes picked; then the picker goes down and requests fall back for 20."""
    (rule,) = [r for g in _rule_groups() for r in g["rules"] if r.get("alert") == ALERT]
    samples = 20 * 60 // SCRAPE
    tests = [
        {
            "interval": f"{SCRAPE}s",
            "input_series": [
                _series(names.PICKED_CLUSTER, f"0+10x{samples} {10 * samples}x{samples}"),
                _series(names.FALLBACK_CLUSTER, f"0x{samples} 0+10x{samples}"),
            ],
            "alert_rule_test": [
                {"eval_time": "19m", "alertname": ALERT},
                {"eval_time": "23m", "alertname": ALERT},
                {
                    "eval_time": "30m",
                    "alertname": ALERT,
                    "exp_alerts": [
                        {"exp_labels": rule["labels"], "exp_annotations": rule["annotations"]}
                    ],
                },
            ],
        }
    ]
    promtool_test_rules(_rule_groups(), tests, tmp_path)


def test_the_dashboard_has_the_pickers_row() -> None:
    board = dashboard(SPEC)
    titles = {p["title"] for p in board["panels"]}
    own = {p.title for p in routing_observed.panels(SPEC)}
    assert own == {
        "Endpoint picker decisions",
        "Prefix-cache hit ratio",
        "Picked and fall-back requests",
    }
    assert own <= titles
    read = {name for _, expr in expressions(board) for name in metric_names(expr)}
    assert {
        "llm_d_epp_scheduler_attempts_total",
        "llm_d_epp_prefix_indexer_hit_ratio_sum",
        "llm_d_epp_prefix_indexer_hit_ratio_count",
        "envoy_cluster_upstream_rq_total",
    } <= read
    for _, expr in expressions(board):
        assert not unknown_metrics(expr), expr


def test_a_deployment_without_a_picker_has_neither_alert_nor_row() -> None:
    plain = SPEC.model_copy(update={"routing": None})
    assert routing_observed.alerts(plain) == ()
    assert routing_observed.panels(plain) == ()
