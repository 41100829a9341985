"""Grafana dashboards, generated from the same signals the alerts and autoscalers use.

There is one layout, filled for each deployment with its engine's queries
(:func:`~eks_inference.observability.signals.signals_of`) and titled with its kind (the engine
on GPUs or Inferentia2), so that every query selects exactly that deployment and the cost
panel uses its price. The JSON is Grafana's
dashboard model (schema version 39); :mod:`eks_inference.charts.monitoring` ships it in a
ConfigMap that the Grafana sidecar of kube-prometheus-stack loads (label
``names.GRAFANA_DASHBOARD_LABEL``). Nothing here is checked in: a dashboard changes exactly
when the signals or the spec do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from eks_inference.observability.observed import observed_engine
from eks_inference.observability.signals import Signals, signals_of
from eks_inference.specification.deployment import ModelDeploymentSpec

Json = dict[str, Any]

SCHEMA_VERSION = 39
_UID_LENGTH = 40
# Grafana's panel grid is 24 columns wide.
_GRID_WIDTH = 24
_STAT_HEIGHT = 4
_PANEL_HEIGHT = 8
_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Series:
    """One query of a panel and how its legend names it (``None``: the engine exports no
    metric for it, and :func:`layout` leaves the series out)."""

    expr: str | None
    legend: str


@dataclass(frozen=True)
class Panel:
    """A dashboard panel: a stat (latest value) or a time series, with its queries."""

    title: str
    description: str
    unit: str
    series: tuple[Series, ...]
    stat: bool = False
    thresholds: tuple[float, ...] = ()


def _percentiles(table: dict[float, str]) -> tuple[Series, ...]:
    return tuple(Series(expr, f"p{round(q * 100)}") for q, expr in table.items())


def layout(signals: Signals) -> tuple[tuple[Panel, ...], ...]:
    """The dashboard's rows of panels, without the series the engine has no metric for (and
    the panels left with none)."""
    rows = []
    for row in _layout(signals):
        panels = []
        for panel in row:
            series = tuple(s for s in panel.series if s.expr is not None)
            if series:
                panels.append(replace(panel, series=series))
        if panels:
            rows.append(tuple(panels))
    return tuple(rows)


def _layout(signals: Signals) -> tuple[tuple[Panel, ...], ...]:
    """The panels of a deployment's dashboard, row by row."""
    accelerator = signals.accelerator_unit
    queue = f"autoscaling: {signals.autoscaled_by}"
    stats = (
        Panel(
            "Ready replicas",
            f"Replicas serving; bounds {signals.min_replicas}-{signals.max_replicas}.",
            "short",
            (Series(signals.replicas_ready, "ready"),),
            stat=True,
            thresholds=(1.0,),
        ),
        Panel(
            "Requests running",
            "Requests in the engines' batches.",
            "short",
            (Series(signals.requests_running, "running"),),
            stat=True,
        ),
        Panel(
            "Requests waiting",
            f"Queued requests; {queue}.",
            "short",
            (Series(signals.requests_waiting, "waiting"),),
            stat=True,
            thresholds=(float(signals.queue_alert),),
        ),
        Panel(
            "KV-cache use (max)",
            f"Alert above {signals.kv_cache_alert:.0%} on any replica.",
            "percentunit",
            (Series(signals.kv_cache_usage_max, "max"),),
            stat=True,
            thresholds=(signals.kv_cache_scale_target, signals.kv_cache_alert),
        ),
        Panel(
            "Generated tokens/s",
            "Output tokens per second, all replicas.",
            "short",
            (Series(signals.generation_tokens_per_second, "generated"),),
            stat=True,
        ),
        Panel(
            "$ per 1M tokens",
            f"${signals.price_per_node_hour:.2f} per node-hour (the catalog's on-demand "
            f"price; a spot pool costs less, see eks-inference plan) x nodes the ready "
            f"replicas occupy "
            f"({signals.replicas_per_node} per node), over generated tokens.",
            "currencyUSD",
            (Series(signals.cost_per_million_tokens, "$/1M tokens"),),
            stat=True,
        ),
    )
    return (
        stats,
        (
            Panel(
                "Requests running and waiting",
                f"Waiting above {signals.queue_per_replica} per replica scales out; {queue}.",
                "short",
                (
                    Series(signals.requests_running, "running"),
                    Series(signals.requests_waiting, "waiting"),
                ),
            ),
            Panel(
                "Replicas",
                "Ready replicas against the number the autoscaler wants.",
                "short",
                (
                    Series(signals.replicas_ready, "ready"),
                    Series(signals.replicas_wanted, "wanted"),
                ),
            ),
        ),
        (
            Panel(
                "Time to first token",
                "Percentiles over the last 2 minutes.",
                "s",
                _percentiles(signals.time_to_first_token),
            ),
            Panel(
                "Inter-token latency",
                "Time between output tokens; percentiles over the last 2 minutes.",
                "s",
                _percentiles(signals.inter_token_latency),
            ),
        ),
        (
            Panel(
                "End-to-end request latency",
                "Percentiles over the last 2 minutes.",
                "s",
                _percentiles(signals.e2e_latency),
            ),
            Panel(
                "Tokens per second",
                "Prompt (prefill) and generated tokens, all replicas.",
                "short",
                (
                    Series(signals.prompt_tokens_per_second, "prompt"),
                    Series(signals.generation_tokens_per_second, "generated"),
                ),
            ),
        ),
        (
            Panel(
                "KV-cache use",
                f"Scale out above {signals.kv_cache_scale_target:.0%} average; alert above "
                f"{signals.kv_cache_alert:.0%} on any replica.",
                "percentunit",
                (
                    Series(signals.kv_cache_usage_max, "max"),
                    Series(signals.kv_cache_usage_avg, "average"),
                ),
                thresholds=(signals.kv_cache_scale_target, signals.kv_cache_alert),
            ),
            Panel(
                f"{accelerator} utilization",
                _ACCELERATOR_NOTES[accelerator],
                "percentunit",
                (Series(signals.accelerator_utilization, "utilization"),),
            ),
            Panel(
                f"{accelerator} memory used",
                "Share of the accelerator memory in use.",
                "percentunit",
                (Series(signals.accelerator_memory, "memory"),),
            ),
        ),
        (
            Panel(
                "Cost per million generated tokens",
                stats[-1].description,
                "currencyUSD",
                (Series(signals.cost_per_million_tokens, "$/1M tokens"),),
            ),
        ),
    )


_ACCELERATOR_NOTES = {
    "GPU": "DCGM exporter, attributed to the deployment's pods.",
    "NeuronCore": "neuron-monitor, for the nodes the deployment's pods run on.",
}


def _threshold_steps(thresholds: tuple[float, ...]) -> Json:
    colours = ("green", "orange", "red")
    steps: list[Json] = [{"color": colours[0], "value": None}]
    steps += [
        {"color": colours[min(i + 1, len(colours) - 1)], "value": value}
        for i, value in enumerate(thresholds)
    ]
    return {"mode": "absolute", "steps": steps}


def _panel_json(panel: Panel, panel_id: int, x: int, y: int, width: int) -> Json:
    height = _STAT_HEIGHT if panel.stat else _PANEL_HEIGHT
    defaults: Json = {"unit": panel.unit}
    if panel.thresholds:
        defaults["thresholds"] = _threshold_steps(panel.thresholds)
    return {
        "id": panel_id,
        "type": "stat" if panel.stat else "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": _DATASOURCE,
        "gridPos": {"h": height, "w": width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": (
            {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
            if panel.stat
            else {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}}
        ),
        "targets": [
            {"refId": chr(ord("A") + i), "expr": s.expr, "legendFormat": s.legend}
            for i, s in enumerate(panel.series)
        ],
    }


def uid(deployment: str) -> str:
    """A dashboard uid within Grafana's 40 characters, stable and unique per deployment."""
    digest = hashlib.sha256(deployment.encode()).hexdigest()[:8]
    return f"eksi-{digest}-{deployment}"[:_UID_LENGTH]


def dashboard(
    spec: ModelDeploymentSpec, signals: Signals | None = None, board_uid: str | None = None
) -> Json:
    """The Grafana dashboard of ``spec``: its kind's layout with its own queries and price.

    ``signals`` are ``signals_of(spec)``, given by a caller that has them already;
    ``board_uid`` is :func:`uid` of its name unless given (a kind's template takes a stand-in,
    :mod:`eks_inference.charts.renamed`).
    """
    signals = signals if signals is not None else signals_of(spec)
    own = tuple(
        Panel(p.title, p.description, p.unit, tuple(Series(e, legend) for e, legend in p.series))
        for p in observed_engine(spec).own_panels(spec)
    )
    panels: list[Json] = []
    y = 0
    for row in (*layout(signals), *((own,) if own else ())):
        width = _GRID_WIDTH // len(row)
        for column, panel in enumerate(row):
            panels.append(_panel_json(panel, len(panels) + 1, column * width, y, width))
        y += _STAT_HEIGHT if all(p.stat for p in row) else _PANEL_HEIGHT
    return {
        "uid": uid(spec.name) if board_uid is None else board_uid,
        "title": f"{spec.name}: {signals.kind.display_name}",
        "description": (
            f"{spec.model.id} on {spec.instance_type}, TP {spec.tensor_parallel_size}; "
            "generated by eks-inference from the deployment spec."
        ),
        "tags": ["eks-inference", signals.kind.tag],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": False,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "browser",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "hide": 0,
                }
            ]
        },
        "panels": panels,
    }


def expressions(board: Json) -> Iterator[tuple[str, str]]:
    """``(panel title, PromQL)`` of every query of a dashboard."""
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
