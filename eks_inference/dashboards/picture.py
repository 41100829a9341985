"""A picture of a deployment's dashboard, drawn offline from sample data (for the README).

The panels, their titles, units, thresholds and places on the grid are those of
:func:`eks_inference.dashboards.dashboard`; only the values are made up: three hours of a
simulated workload (a daily-shaped arrival rate with a burst) served by the deployment's
replicas at its batch size. Run::

    python -m eks_inference.dashboards.picture deployments.yaml mistral-7b-g6e docs/dashboard.png
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from eks_inference.dashboards import Json, dashboard
from eks_inference.platform import PlatformSpec
from eks_inference.spec import ModelDeploymentSpec

_MINUTES = 180
# Decode speed of one sequence and the seconds a request spends decoding, for the sample.
_TOKENS_PER_SECOND_PER_SEQUENCE = 28.0
_OUTPUT_TOKENS = 300
_PROMPT_TOKENS = 900

Samples = dict[str, list[float]]


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
        scales = spec.engine == "rayservice" or spec.scaling.autoscale
        if (
            scales
            and minute + 8 < _MINUTES
            and wait > batch / 4
            and replicas[minute + 8] <= replicas[minute]
        ):
            # A new replica serves once its model loaded (the sample's 8 minutes).
            for later in range(minute + 8, _MINUTES):
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
    return {
        "Ready replicas": {"ready": replicas},
        "Requests running": {"running": running},
        "Requests waiting": {"waiting": waiting},
        "KV-cache use (max)": {"max": [min(0.99, v * 1.05) for v in kv]},
        "Generated tokens/s": {"generated": tokens},
        "$ per 1M tokens": {"$/1M tokens": cost},
        "Requests running and waiting": {"running": running, "waiting": waiting},
        "Replicas": {"ready": replicas, "wanted": replicas},
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


_FORMATS: dict[str, Callable[[float], str]] = {
    "percentunit": lambda v: f"{v:.0%}",
    "currencyUSD": lambda v: f"${v:.2f}",
    "s": lambda v: f"{v:.2f} s",
    "short": lambda v: f"{v:,.0f}",
}


def _tick_format(format_value: Callable[[float], str]) -> Callable[[float, object], str]:
    return lambda value, _position: format_value(value)


def render(spec: ModelDeploymentSpec, path: Path) -> Json:
    """Draw ``spec``'s dashboard with sample values into the PNG ``path``; the dashboard."""
    board = dashboard(spec)
    samples = _simulate(spec)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"])
    figure = plt.figure(figsize=(18, rows * 0.42))
    figure.suptitle(f"{board['title']}  (sample data)", fontsize=14, x=0.12, y=0.93, ha="left")
    grid = figure.add_gridspec(rows, 24, hspace=2.2, wspace=1.2)
    for panel in board["panels"]:
        pos = panel["gridPos"]
        axes = figure.add_subplot(
            grid[pos["y"] : pos["y"] + pos["h"], pos["x"] : pos["x"] + pos["w"]]
        )
        axes.set_title(panel["title"], fontsize=10, loc="left")
        unit = panel["fieldConfig"]["defaults"]["unit"]
        series = samples[panel["title"]]
        if panel["type"] == "stat":
            (values,) = [series[t["legendFormat"]] for t in panel["targets"]]
            axes.text(0.5, 0.4, _FORMATS[unit](values[-1]), ha="center", va="center", fontsize=20)
            axes.set_axis_off()
            continue
        for target in panel["targets"]:
            axes.plot(series[target["legendFormat"]], label=target["legendFormat"], linewidth=1.2)
        steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
        for step in steps[1:]:
            axes.axhline(step["value"], color=step["color"], linestyle="--", linewidth=0.8)
        axes.yaxis.set_major_formatter(_tick_format(_FORMATS[unit]))
        axes.set_xticks([0, 60, 120, 179], ["-3h", "-2h", "-1h", "now"], fontsize=8)
        axes.tick_params(axis="y", labelsize=8)
        axes.legend(fontsize=7, loc="upper left")
        axes.grid(alpha=0.3)
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
