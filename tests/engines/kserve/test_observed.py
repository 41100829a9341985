"""KServe's cold-start alerts and dashboard row: rendered, valid for the pinned CRD and promtool,
and run by promtool on Knative series shaped like cold starts (how many, how long)."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from eks_inference.charts.render import render_platform
from eks_inference.engines.kserve import observed as kserve_observed
from eks_inference.metrics import metric_names, unknown_metrics
from eks_inference.observability.dashboards import dashboard, expressions
from eks_inference.observability.signals import DEPLOYMENT_LABEL
from eks_inference.ops.plan import plan_platform
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.startup_budget import ESTIMATE_MARGIN
from tests.helpers.objects import crd_validator, one, schema_errors
from tests.helpers.observed import (
    PROMTOOL,
    PROMTOOL_MISSING,
    promtool_check_rules,
    promtool_test_rules,
)
from tests.helpers.platforms import CRDS, REPO
from tests.helpers.rendered import CONTEXT

EXAMPLE = PlatformSpec.from_yaml(REPO / "examples" / "kserve-platform.yaml")
(SPEC,) = EXAMPLE.deployments
SCRAPE = 15  # seconds between the series' samples, the platform's scrape interval
OWN_ALERTS = {"KServeColdStartSlow", "KServeColdStartsFrequent"}


@cache
def _rule_groups() -> list[dict[str, Any]]:
    objects = render_platform(EXAMPLE, CONTEXT)[SPEC.name]
    rule = one(objects, "PrometheusRule")
    validator = crd_validator(CRDS / "monitoring.coreos.com_prometheusrules.yaml", "v1")
    assert schema_errors(validator, rule) == []
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in _rule_groups() for r in g["rules"] if "alert" in r}


def test_the_slow_cold_start_alert_waits_the_margin_over_the_plans_estimate() -> None:
    alerts = _alerts()
    assert set(alerts) >= OWN_ALERTS
    (planned,) = plan_platform(EXAMPLE).deployments
    assert planned.cold_start is not None
    slow = math.ceil(ESTIMATE_MARGIN * planned.cold_start.total_seconds)
    assert kserve_observed.slow_cold_start_seconds(SPEC) == slow
    assert alerts["KServeColdStartSlow"]["for"] == f"{slow}s"
    for name in OWN_ALERTS:
        expr = alerts[name]["expr"]
        assert not unknown_metrics(expr), expr
        assert {"kn_revision_pods_requested"} <= metric_names(expr)
        assert alerts[name]["labels"][DEPLOYMENT_LABEL] == SPEC.name
    assert "kn_revision_pods_count" in metric_names(alerts["KServeColdStartSlow"]["expr"])


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_the_rules_pass_promtool(tmp_path: Path) -> None:
    result = promtool_check_rules(_rule_groups(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_has_the_cold_start_row() -> None:
    board = dashboard(SPEC)
    panels = {p["title"]: p for p in board["panels"]}
    assert {"Cold starts", "Cold start duration"} <= set(panels)
    read = {name for _, expr in expressions(board) for name in metric_names(expr)}
    assert {"kn_revision_pods_requested", "kn_revision_pods_count"} <= read
    for _, expr in expressions(board):
        assert not unknown_metrics(expr), expr
    targets = [t["expr"] for t in panels["Cold start duration"]["targets"]]
    (planned,) = plan_platform(EXAMPLE).deployments
    assert planned.cold_start is not None
    assert f"vector({planned.cold_start.total_seconds:.0f})" in targets


def _values(*runs: tuple[int, int]) -> str:
    """promtool's series notation for runs of (value, samples)."""
    return " ".join(f"{value}x{count - 1}" for value, count in runs)


def _series(requested: str, ready: str) -> list[dict[str, str]]:
    labels = f'{DEPLOYMENT_LABEL}="{SPEC.name}", kn_revision_name="{SPEC.name}-predictor-00001"'
    return [
        {"series": f"kn_revision_pods_requested{{{labels}}}", "values": requested},
        {"series": f"kn_revision_pods_count{{{labels}}}", "values": ready},
    ]


def _firing(name: str) -> list[dict[str, Any]]:
    """The alert ``name`` firing, with the labels and annotations the rule gives it."""
    rule = _alerts()[name]
    return [{"exp_labels": rule["labels"], "exp_annotations": rule["annotations"]}]


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_a_cold_start_past_the_margin_fires_and_not_before(tmp_path: Path) -> None:
    """Idle 10 minutes, then a replica is asked for and none becomes ready."""
    slow = kserve_observed.slow_cold_start_seconds(SPEC)
    idle, stuck = 40, 160  # samples: 10 minutes at zero, then 40 minutes starting
    before = math.floor((idle * SCRAPE + slow) / 60) - 1  # minutes: still pending
    after = math.ceil((idle * SCRAPE + slow) / 60) + 1
    promtool_test_rules(
        _rule_groups(),
        [
            {
                "interval": f"{SCRAPE}s",
                "input_series": _series(_values((0, idle), (1, stuck)), _values((0, idle + stuck))),
                "alert_rule_test": [
                    {"eval_time": f"{before}m", "alertname": "KServeColdStartSlow"},
                    {
                        "eval_time": f"{after}m",
                        "alertname": "KServeColdStartSlow",
                        "exp_alerts": _firing("KServeColdStartSlow"),
                    },
                ],
            }
        ],
        tmp_path,
    )


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_the_panel_counts_cold_starts_and_averages_their_duration(tmp_path: Path) -> None:
    """Two cold starts in an hour, of 5 and 3 minutes: 2 starts, 240 s on average."""
    requested = _values((0, 40), (1, 60), (0, 60), (1, 60), (0, 20))
    ready = _values((0, 40), (0, 20), (1, 40), (0, 60), (0, 12), (1, 48), (0, 20))
    starts, duration = kserve_observed.panels(SPEC)
    count, mean = starts.series[0][0], duration.series[0][0]
    promtool_test_rules(
        _rule_groups(),
        [
            {
                "interval": f"{SCRAPE}s",
                "input_series": _series(requested, ready),
                "promql_expr_test": [
                    {"expr": count, "eval_time": "60m", "exp_samples": [{"value": 2}]},
                    {"expr": mean, "eval_time": "60m", "exp_samples": [{"value": 240}]},
                ],
                "alert_rule_test": [{"eval_time": "60m", "alertname": "KServeColdStartSlow"}],
            }
        ],
        tmp_path,
    )


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_cold_starts_more_often_than_hourly_fire(tmp_path: Path) -> None:
    """A 40-minute cycle: 20 minutes at zero, a cold start of 1 minute, 19 minutes serving."""
    cycles = 10
    requested = _values(*((0, 80), (1, 80)) * cycles)
    ready = _values(*((0, 84), (1, 76)) * cycles)
    limit = kserve_observed.FREQUENT_COLD_STARTS
    # The n-th cold start is at 20 + 40 (n - 1) minutes: the first over the limit in 6 hours.
    over = 20 + 40 * limit
    promtool_test_rules(
        _rule_groups(),
        [
            {
                "interval": f"{SCRAPE}s",
                "input_series": _series(requested, ready),
                "alert_rule_test": [
                    {"eval_time": f"{over - 1}m", "alertname": "KServeColdStartsFrequent"},
                    {
                        "eval_time": f"{over + 1}m",
                        "alertname": "KServeColdStartsFrequent",
                        "exp_alerts": _firing("KServeColdStartsFrequent"),
                    },
                ],
            }
        ],
        tmp_path,
    )


def test_the_docs_quote_the_thresholds() -> None:
    text = " ".join((REPO / "docs" / "scale-to-zero.md").read_text().split())
    assert f"{kserve_observed.slow_cold_start_seconds(SPEC)} s for the example" in text
    limit, window = kserve_observed.FREQUENT_COLD_STARTS, kserve_observed.FREQUENT_WINDOW
    assert f"more than {limit} cold starts in {window.removesuffix('h')} hours" in text
