"""LMCache's monitors of a vLLM deployment with ``kv_cache``: its metrics reach the server's
``/metrics``, their names are LMCache 0.5.6's, the dashboard shows the hit ratio and the
tiers, and the alert on a collapsing hit ratio is valid and run by promtool on counters shaped
as LMCache exports them (``_total``, one series per pod)."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from eks_inference import metrics
from eks_inference.charts import kv_offload
from eks_inference.charts.render import render_platform
from eks_inference.engines.vllm import lmcache_observed
from eks_inference.observability.dashboards import dashboard, expressions
from eks_inference.observability.signals import DEPLOYMENT_LABEL
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.objects import crd_validator, of_kind, one, schema_errors
from tests.helpers.observed import PROMTOOL, PROMTOOL_MISSING, promtool_test_rules
from tests.helpers.platforms import CRDS, REPO, UPSTREAM, reference
from tests.helpers.rendered import CONTEXT

EXAMPLE = PlatformSpec.from_yaml(REPO / "examples" / "lmcache.yaml")
(SPEC,) = EXAMPLE.deployments
UPSTREAM_METRICS = UPSTREAM / "lmcache-0.5.6-metrics.txt"
SCRAPE = 15
POD = f"{SPEC.name}-6b7c9d8f4-q2w3e"


def _upstream() -> dict[str, str]:
    """LMCache 0.5.6's metric names and types, as recorded from its wheel."""
    rows = [
        line.split()
        for line in UPSTREAM_METRICS.read_text().splitlines()
        if line and not line.startswith("#")
    ]
    return {row[0]: row[1] for row in rows}


@cache
def _objects() -> list[dict[str, Any]]:
    return render_platform(EXAMPLE, CONTEXT)[SPEC.name]


def test_the_metrics_read_are_lmcache_0_5_6s_with_their_types() -> None:
    upstream = _upstream()
    assert len(upstream) > 50
    for metric in metrics.LMCACHE_METRICS:
        assert upstream.get(metric.name) == metric.kind.value, metric.name


def test_the_servers_processes_share_one_metrics_directory() -> None:
    (deployment,) = of_kind(_objects(), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PROMETHEUS_MULTIPROC_DIR"] == kv_offload.METRICS_PATH
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[kv_offload.METRICS_VOLUME] == kv_offload.METRICS_PATH
    (volume,) = [v for v in pod["volumes"] if v["name"] == kv_offload.METRICS_VOLUME]
    assert "emptyDir" in volume


def test_a_deployment_without_kv_cache_has_neither_alert_nor_panels() -> None:
    platform = PlatformSpec.model_validate(reference())
    plain = [s for s in platform.deployments if s.kv_cache is None]
    assert plain
    for spec in plain:
        assert lmcache_observed.alerts(spec) == ()
        assert lmcache_observed.panels(spec) == ()


def test_the_dashboard_shows_the_hit_ratio_and_each_tier() -> None:
    board = dashboard(SPEC)
    titles = {p["title"] for p in board["panels"]}
    assert {"LMCache hit ratio", "LMCache tiers"} <= titles
    found = set()
    for _, expr in expressions(board):
        assert not metrics.unknown_metrics(expr), expr
        found |= metrics.metric_names(expr)
    assert {s for m in metrics.LMCACHE_METRICS for s in m.series} - found == {
        metrics.LMCACHE_DISK_TIER_BYTES.one()
    }
    assert SPEC.kv_cache is not None
    tiers_given = SPEC.kv_cache.model_copy(update={"offload": "cpu+disk", "disk_gib": 100})
    disk = SPEC.model_copy(update={"kv_cache": tiers_given})
    (_, tiers) = lmcache_observed.panels(disk)
    assert [legend for _, legend in tiers.series] == [
        "{{pod}} CPU tier (of 32 GiB)",
        "{{pod}} disk tier (of 100 GiB)",
    ]


@cache
def _rule_groups() -> list[dict[str, Any]]:
    rule = one(_objects(), "PrometheusRule")
    validator = crd_validator(CRDS / "monitoring.coreos.com_prometheusrules.yaml", "v1")
    assert schema_errors(validator, rule) == []
    return copy.deepcopy(rule["spec"]["groups"])


def _alert() -> dict[str, Any]:
    (found,) = [
        r
        for g in _rule_groups()
        for r in g["rules"]
        if r.get("alert") == lmcache_observed.HIT_RATIO_COLLAPSED
    ]
    return found


def _counter(metric: metrics.Metric, values: str) -> dict[str, str]:
    labels = f'{DEPLOYMENT_LABEL}="{SPEC.name}", pod="{POD}", model_name="m", worker_id="0"'
    return {"series": f"{metric.one()}{{{labels}}}", "values": values}


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_a_collapsing_hit_ratio_fires_and_a_steady_one_does_not(tmp_path: Path) -> None:
    """Ninety minutes at a hit ratio of 0.6 (100 tokens asked, 60 hit per scrape), then an
    hour at 0.05: the ten-minute ratio falls under half the hour-old one about seven minutes
    into the fall, and the alert fires fifteen minutes after that."""
    steady, fallen = 90 * 60 // SCRAPE, 60 * 60 // SCRAPE
    hits_then = 60 * steady
    series = [
        _counter(metrics.LMCACHE_REQUESTED_TOKENS, f"0+100x{steady + fallen}"),
        _counter(metrics.LMCACHE_HIT_TOKENS, f"0+60x{steady} {hits_then + 5}+5x{fallen - 1}"),
    ]
    alert = _alert()
    test = {
        "interval": f"{SCRAPE}s",
        "input_series": series,
        "promql_expr_test": [
            {
                "expr": lmcache_observed.hit_ratio(SPEC),
                "eval_time": "80m",
                "exp_samples": [{"value": 0.6}],
            },
        ],
        "alert_rule_test": [
            {"eval_time": "85m", "alertname": lmcache_observed.HIT_RATIO_COLLAPSED},
            {"eval_time": "105m", "alertname": lmcache_observed.HIT_RATIO_COLLAPSED},
            {
                "eval_time": "120m",
                "alertname": lmcache_observed.HIT_RATIO_COLLAPSED,
                "exp_alerts": [
                    {"exp_labels": alert["labels"], "exp_annotations": alert["annotations"]}
                ],
            },
        ],
    }
    promtool_test_rules(_rule_groups(), [test], tmp_path)
