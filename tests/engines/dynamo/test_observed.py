"""Dynamo's alerts and dashboard: rendered, valid for the pinned CRD and promtool, reading the
frontend's and workers' metrics of the pinned release, and the KV-transfer alert run by
promtool on NIXL transfer times that are slow, and fast."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from eks_inference import metrics
from eks_inference.charts.render import render_platform
from eks_inference.engines.dynamo.engine import KV_TRANSFER_ALERT_S
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
from tests.helpers.platforms import CRDS, REPO
from tests.helpers.rendered import CONTEXT

EXAMPLE = PlatformSpec.from_yaml(REPO / "examples" / "dynamo.yaml")
DISAGG, AGG = EXAMPLE.deployments
SCRAPE = 15


@cache
def _rule_groups(name: str) -> list[dict[str, Any]]:
    rule = one(render_platform(EXAMPLE, CONTEXT)[name], "PrometheusRule")
    validator = crd_validator(CRDS / "monitoring.coreos.com_prometheusrules.yaml", "v1")
    assert schema_errors(validator, rule) == []
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _alerts(name: str) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in _rule_groups(name) for r in g["rules"] if "alert" in r}


def test_only_a_disaggregated_graph_alerts_on_its_kv_transfers() -> None:
    assert "DynamoKvTransferSlow" in _alerts(DISAGG.name)
    assert "DynamoKvTransferSlow" not in _alerts(AGG.name)
    for name in (DISAGG.name, AGG.name):
        for alert in _alerts(name).values():
            assert not unknown_metrics(alert["expr"]), alert["expr"]


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
@pytest.mark.parametrize("name", [DISAGG.name, AGG.name])
def test_the_rules_pass_promtool(name: str, tmp_path: Path) -> None:
    result = promtool_check_rules(_rule_groups(name), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_reads_ttft_itl_queue_and_kv_transfer_of_the_release() -> None:
    board = dashboard(DISAGG)
    read = {n for _, expr in expressions(board) for n in metric_names(expr)}
    assert {
        metrics.DYNAMO_FRONTEND_TTFT.bucket(),
        metrics.DYNAMO_FRONTEND_ITL.bucket(),
        metrics.DYNAMO_FRONTEND_QUEUED.one(),
        metrics.VLLM_NIXL_TRANSFER_TIME.bucket(),
    } <= read
    for _, expr in expressions(board):
        assert not unknown_metrics(expr), expr
    titles = {p["title"] for p in board["panels"]}
    assert "KV transfer time (prefill to decode)" in titles
    assert "KV transfer time (prefill to decode)" not in {
        p["title"] for p in dashboard(AGG)["panels"]
    }


def _transfers(per_sample: dict[str, int]) -> list[dict[str, str]]:
    """NIXL's histogram on a decode worker: each bucket's count growing by ``per_sample``."""
    labels = f'{DEPLOYMENT_LABEL}="{DISAGG.name}"'
    return [
        {
            "series": f'{metrics.VLLM_NIXL_TRANSFER_TIME.bucket()}{{{labels}, le="{le}"}}',
            "values": f"0+{step}x120",
        }
        for le, step in per_sample.items()
    ]


def _promtool_test(tmp_path: Path, series: list[dict[str, str]], fires: bool) -> None:
    rule = _alerts(DISAGG.name)["DynamoKvTransferSlow"]
    expected = (
        [{"exp_labels": rule["labels"], "exp_annotations": rule["annotations"]}] if fires else []
    )
    test = {
        "interval": f"{SCRAPE}s",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "25m", "alertname": "DynamoKvTransferSlow", "exp_alerts": expected}
        ],
    }
    promtool_test_rules(_rule_groups(DISAGG.name), [test], tmp_path)


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_slow_transfers_fire_and_fast_ones_do_not(tmp_path: Path) -> None:
    assert KV_TRANSFER_ALERT_S == 0.5
    # Every transfer between 0.5 s and 1 s: the 95th percentile is above 0.5 s.
    slow = {"0.1": 0, "0.5": 0, "1": 4, "+Inf": 4}
    _promtool_test(tmp_path, _transfers(slow), fires=True)
    # Every transfer under 0.1 s.
    fast = {"0.1": 4, "0.5": 4, "1": 4, "+Inf": 4}
    _promtool_test(tmp_path, _transfers(fast), fires=False)
