"""The LoRA adapters' alert and dashboard row of a vLLM deployment: rendered, valid for the
pinned CRD and promtool, and run by promtool on ``vllm:lora_requests_info`` series shaped as
vLLM 0.34.0 exports them (one series per running/waiting combination, valued at the time it
was last seen, the older combinations still exported at their last time)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from eks_inference.charts.render import render_platform
from eks_inference.engines.vllm import observed as vllm_observed
from eks_inference.metrics import metric_names, unknown_metrics
from eks_inference.observability.dashboards import dashboard, expressions
from eks_inference.observability.signals import DEPLOYMENT_LABEL
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.objects import crd_validator, one, schema_errors
from tests.helpers.observed import (
    PROMTOOL,
    PROMTOOL_MISSING,
    promtool_check_rules,
    promtool_test_rules,
)
from tests.helpers.platforms import CRDS, REPO, reference
from tests.helpers.rendered import CONTEXT

EXAMPLE = PlatformSpec.from_yaml(REPO / "examples" / "lora-adapters.yaml")
(SPEC,) = EXAMPLE.deployments
SCRAPE = 15
POD = f"{SPEC.name}-7d9c8b6f5-x2k4q"


@cache
def _rule_groups() -> list[dict[str, Any]]:
    rule = one(render_platform(EXAMPLE, CONTEXT)[SPEC.name], "PrometheusRule")
    validator = crd_validator(CRDS / "monitoring.coreos.com_prometheusrules.yaml", "v1")
    assert schema_errors(validator, rule) == []
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _alert() -> dict[str, Any]:
    (found,) = [
        r for g in _rule_groups() for r in g["rules"] if r.get("alert") == "LoraAdaptersWaiting"
    ]
    return found


def test_the_alert_reads_the_adapters_gauge_of_the_deployment() -> None:
    alert = _alert()
    assert metric_names(alert["expr"]) == {"vllm:lora_requests_info"}
    assert not unknown_metrics(alert["expr"])
    assert alert["labels"][DEPLOYMENT_LABEL] == SPEC.name
    assert "all 4 in use" in alert["annotations"]["summary"]


def test_a_deployment_without_adapters_has_neither_alert_nor_panels() -> None:
    platform = PlatformSpec.model_validate(reference())
    for spec in platform.deployments:
        if spec.engine == "vllm":
            assert vllm_observed.alerts(spec) == ()
            assert vllm_observed.panels(spec) == ()


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_the_rules_pass_promtool(tmp_path: Path) -> None:
    result = promtool_check_rules(_rule_groups(), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_has_the_adapters_row() -> None:
    board = dashboard(SPEC)
    titles = {p["title"] for p in board["panels"]}
    assert {"LoRA adapters running and waiting", "Replicas with adapters waiting"} <= titles
    for _, expr in expressions(board):
        assert not unknown_metrics(expr), expr


def _series(running: str, waiting: str, values: str) -> dict[str, str]:
    labels = (
        f'{DEPLOYMENT_LABEL}="{SPEC.name}", pod="{POD}", max_lora="4", '
        f'running_lora_adapters="{running}", waiting_lora_adapters="{waiting}"'
    )
    return {"series": f"vllm:lora_requests_info{{{labels}}}", "values": values}


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_adapters_waiting_ten_minutes_fire_and_not_before(tmp_path: Path) -> None:
    """Ten minutes with one adapter running and none waiting, then twenty with an adapter
    waiting for a slot: the old combination stays exported at its last time, the new one is
    the latest; the alert fires ten minutes into the wait, and the panel counts the replica."""
    quiet, busy = 40, 80  # samples of 15 s
    series = [
        _series("support-tone", "", f"0+{SCRAPE}x{quiet - 1} {(quiet - 1) * SCRAPE}x{busy}"),
        _series(
            "support-tone,sql-writer,legal-summary,x",
            "legal-summary",
            f"_x{quiet} {quiet * SCRAPE}+{SCRAPE}x{busy - 1}",
        ),
    ]
    alert = _alert()
    _, waiting_panel = vllm_observed.panels(SPEC)
    test = {
        "interval": f"{SCRAPE}s",
        "input_series": series,
        "promql_expr_test": [
            {"expr": waiting_panel.series[0][0], "eval_time": "5m", "exp_samples": [{"value": 0}]},
            {"expr": waiting_panel.series[0][0], "eval_time": "15m", "exp_samples": [{"value": 1}]},
        ],
        "alert_rule_test": [
            {"eval_time": "19m", "alertname": "LoraAdaptersWaiting"},
            {
                "eval_time": "21m",
                "alertname": "LoraAdaptersWaiting",
                "exp_alerts": [
                    {"exp_labels": alert["labels"], "exp_annotations": alert["annotations"]}
                ],
            },
        ],
    }
    promtool_test_rules(_rule_groups(), [test], tmp_path)
