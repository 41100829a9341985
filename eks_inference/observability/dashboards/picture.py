"""A picture of a deployment's dashboard, drawn offline from sample data (for the docs).

The panels, their titles, units, thresholds and places on the grid are those of
:func:`eks_inference.observability.dashboards.dashboard`; only the values are made up: three
hours of a simulated workload (a daily-shaped arrival rate with a burst) served by the
deployment's replicas at its batch size. Run::

    python -m eks_inference.observability.dashboards.picture deployments.yaml qwen25-7b-g6e \
        docs/dashboard.png
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter, MaxNLocator
from numpy.typing import ArrayLike

from eks_inference.observability.dashboards import Json, dashboard
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import engine_of
from eks_inference.specification.platform import PlatformSpec

_MINUTES = 180
# Decode speed of one sequence and the seconds a request spends decoding, for the sample.
_TOKENS_PER_SECOND_PER_SEQUENCE = 28.0
_OUTPUT_TOKENS = 300
_PROMPT_TOKENS = 900
# Minutes from a scale-out decision to the new replica serving (node, image and model load).
_LOAD_MINUTES = 8

Samples = dict[str, list[float]]
# A rectangle in figure fractions: left, bottom, width, height.
Rect = tuple[float, float, float, float]


def _simulate(spec: ModelDeploymentSpec) -> dict[str, Samples]:
    """Sample series by panel title, one value per minute."""
    batch = spec.limits.max_num_seqs
    replicas = [float(spec.scaling.min_replicas or 1)] * _MINUTES
    running, waiting, kv, ttft, itl, e2e, tokens, prompt, cost = ([] for _ in range(9))
    price = spec.instance.price_per_hour
    for minute in range(_MINUTES):
        burst = 2.6 if 95 <= minute < 135 else 1.0
        demand = batch * replicas[0] * (0.6 + 0.35 * math.sin(minute / 28.0)) * burst
        capacity = batch * replicas[minute]
        run = min(demand, capacity)
        wait = max(0.0, demand - capacity)
        scales = engine_of(spec).scales_at_run_time(spec)
        if (
            scales
            and minute + _LOAD_MINUTES < _MINUTES
            and wait > batch / 4
            and replicas[minute + _LOAD_MINUTES] <= replicas[minute]
        ):
            # A new replica serves once its model loaded.
            for later in range(minute + _LOAD_MINUTES, _MINUTES):
                replicas[later] = min(replicas[later] + 1, spec.scaling.max_replicas)
        generated = run * _TOKENS_PER_SECOND_PER_SEQUENCE
        first = 0.12 + 0.9 * wait / batch
        nodes = math.ceil(replicas[minute] / spec.replicas_per_node)
        running.append(run)
        waiting.append(wait)
        kv.append(min(0.97, 0.08 + 0.85 * run / capacity))
        ttft.append(first)
        itl.append(1.0 / _TOKENS_PER_SECOND_PER_SEQUENCE * (1 + 0.4 * run / capacity))
        e2e.append(first + _OUTPUT_TOKENS * itl[-1])
        tokens.append(generated)
        prompt.append(generated * _PROMPT_TOKENS / _OUTPUT_TOKENS)
        cost.append(nodes * price / max(generated * 3600, 1.0) * 1_000_000)

    def spread(values: list[float]) -> Samples:
        return {"p50": values, "p95": [v * 1.7 for v in values], "p99": [v * 2.4 for v in values]}

    utilization = [0.15 + 0.8 * r / (batch * n) for r, n in zip(running, replicas, strict=True)]
    # The autoscaler wants a replica from its decision on, a load before it is ready.
    wanted = [replicas[min(m + _LOAD_MINUTES, _MINUTES - 1)] for m in range(_MINUTES)]
    return {
        "Ready replicas": {"ready": replicas},
        "Requests running": {"running": running},
        "Requests waiting": {"waiting": waiting},
        "KV-cache use (max)": {"max": [min(0.99, v * 1.05) for v in kv]},
        "Generated tokens/s": {"generated": tokens},
        "$ per 1M tokens": {"$/1M tokens": cost},
        "Requests running and waiting": {"running": running, "waiting": waiting},
        "Replicas": {"ready": replicas, "wanted": wanted},
        "Time to first token": spread(ttft),
        "Inter-token latency": spread(itl),
        "End-to-end request latency": spread(e2e),
        "Tokens per second": {"prompt": prompt, "generated": tokens},
        "KV-cache use": {"max": [min(0.99, v * 1.05) for v in kv], "average": kv},
        "GPU utilization": {"utilization": utilization},
        "NeuronCore utilization": {"utilization": utilization},
        "GPU memory used": {"memory": [0.88] * _MINUTES},
        "NeuronCore memory used": {"memory": [0.71] * _MINUTES},
        "Cost per million generated tokens": {"$/1M tokens": cost},
    }


# Each unit's label of a value at a number of decimals, and the decimals a stat panel shows
# (Grafana's own rounding for these units).
_UNITS: dict[str, tuple[Callable[[float, int], str], int]] = {
    "percentunit": (lambda value, decimals: f"{value:.{decimals}%}", 0),
    "currencyUSD": (lambda value, decimals: f"${value:,.{decimals}f}", 2),
    "s": (lambda value, decimals: f"{value:.{decimals}f} s", 2),
    "short": (lambda value, decimals: f"{value:,.{decimals}f}", 0),
}
# Decimals a tick label may add to its unit's to tell neighbouring ticks apart.
_EXTRA_DECIMALS = 3

# The figure is Grafana's grid: 24 columns and rows of fixed height, in inches. Inside its
# box each panel keeps room for its title above the plot and its tick labels below and to the
# left, so no panel's text reaches into another's.
_COLUMN_IN = 0.75
_ROW_IN = 0.42
_HEADER_IN = 0.6
_TITLE_IN = 0.34
_XTICKS_IN = 0.32
_YTICKS_IN = 0.8
_GAP_IN = 0.15


class _UnitFormatter(Formatter):
    """Tick labels in a panel's unit, with the fewest decimals that keep every label distinct.

    The unit's own rounding alone repeats labels on a narrow range (1, 1, 2, 2 replicas).
    """

    def __init__(self, unit: str) -> None:
        self._label, self._decimals = _UNITS[unit]

    def __call__(self, x: float, pos: int | None = None) -> str:
        return self._label(x, self._decimals)

    def format_ticks(self, values: ArrayLike) -> list[str]:
        ticks = [float(v) for v in np.asarray(values).ravel()]
        for decimals in range(self._decimals, self._decimals + _EXTRA_DECIMALS + 1):
            labels = [self._label(v, decimals) for v in ticks]
            if len(set(labels)) == len(labels):
                break
        return labels


def draw(spec: ModelDeploymentSpec) -> tuple[Figure, Json]:
    """``spec``'s dashboard drawn with sample values, and the dashboard it draws."""
    board = dashboard(spec)
    samples = _simulate(spec)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"])
    width_in = 24 * _COLUMN_IN
    height_in = _HEADER_IN + rows * _ROW_IN
    figure = plt.figure(figsize=(width_in, height_in))
    figure.text(
        _GAP_IN / width_in,
        1 - _GAP_IN / height_in,
        f"{board['title']}  (sample data)",
        fontsize=14,
        ha="left",
        va="top",
    )

    def box(left_in: float, top_in: float, right_in: float, bottom_in: float) -> Rect:
        """A rectangle given in inches from the figure's top left, in figure fractions."""
        return (
            left_in / width_in,
            1 - bottom_in / height_in,
            (right_in - left_in) / width_in,
            (bottom_in - top_in) / height_in,
        )

    for panel in board["panels"]:
        pos = panel["gridPos"]
        left = pos["x"] * _COLUMN_IN + _GAP_IN
        right = (pos["x"] + pos["w"]) * _COLUMN_IN - _GAP_IN
        top = _HEADER_IN + pos["y"] * _ROW_IN + _TITLE_IN
        bottom = _HEADER_IN + (pos["y"] + pos["h"]) * _ROW_IN
        unit = panel["fieldConfig"]["defaults"]["unit"]
        series = samples[panel["title"]]
        if panel["type"] == "stat":
            axes = figure.add_axes(box(left, top, right, bottom - _GAP_IN))
            axes.set_title(panel["title"], fontsize=10, loc="left")
            (values,) = [series[t["legendFormat"]] for t in panel["targets"]]
            label, decimals = _UNITS[unit]
            axes.text(0.5, 0.4, label(values[-1], decimals), ha="center", va="center", fontsize=20)
            axes.set_axis_off()
            continue
        axes = figure.add_axes(box(left + _YTICKS_IN, top, right, bottom - _XTICKS_IN))
        axes.set_title(panel["title"], fontsize=10, loc="left")
        for target in panel["targets"]:
            axes.plot(series[target["legendFormat"]], label=target["legendFormat"], linewidth=1.2)
        steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
        for step in steps[1:]:
            axes.axhline(step["value"], color=step["color"], linestyle="--", linewidth=0.8)
        if unit == "short":
            # Counts: replicas and requests come in whole numbers.
            axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.yaxis.set_major_formatter(_UnitFormatter(unit))
        axes.set_xticks([0, 60, 120, 179], ["-3h", "-2h", "-1h", "now"], fontsize=8)
        axes.tick_params(axis="y", labelsize=8)
        axes.legend(fontsize=7, loc="upper left")
        axes.grid(alpha=0.3)
    return figure, board


def render(spec: ModelDeploymentSpec, path: Path) -> Json:
    """Draw ``spec``'s dashboard with sample values into the PNG ``path``; the dashboard."""
    figure, board = draw(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(figure)
    return board


def main(argv: list[str] | None = None) -> None:
    """``platform deployment out.png``: draw one deployment's dashboard."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("platform", type=Path)
    parser.add_argument("deployment")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    spec = PlatformSpec.from_yaml(args.platform).deployment(args.deployment)
    render(spec, args.out)


if __name__ == "__main__":
    main()
