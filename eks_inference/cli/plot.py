"""``plan --plot``: cost per million tokens against throughput, one labelled point per candidate.

Drawn with matplotlib's object API on the Agg canvas, so it needs no display and changes no
global backend of the process that calls it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import typer
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from eks_inference.catalog import ModelArchitecture
from eks_inference.cli import console
from eks_inference.cli.output import emit
from eks_inference.ops import plan as planning
from eks_inference.ops.errors import CommandFailed
from eks_inference.ops.plan import ConfigurationPlan

_COLORS = {
    "Inferentia2": "tab:orange",
    "L40S": "tab:green",
    "A10G": "tab:blue",
    "A100": "tab:purple",
}


def point_label(plan: ConfigurationPlan) -> str:
    """The label drawn beside a point: instance and TP, and the throughput's source if measured."""
    suffix = " (measured)" if plan.throughput_source == "measured" else ""
    return f"{plan.label}{suffix}"


def cost_throughput_figure(
    points: Sequence[ConfigurationPlan], *, title: str, selected: ConfigurationPlan | None = None
) -> Figure:
    """A scatter of $ per 1M tokens against tokens/s, each point labelled, ``selected`` ringed."""
    figure = Figure(figsize=(10, 6.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    drawn = [*points, selected] if selected is not None else list(points)
    for plan in points:
        axes.scatter(
            plan.tokens_per_second,
            plan.cost_per_million_tokens,
            color=_COLORS.get(plan.accelerator, "tab:gray"),
            s=40,
            zorder=3,
        )
    if selected is not None:
        axes.scatter(
            selected.tokens_per_second,
            selected.cost_per_million_tokens,
            facecolors="none",
            edgecolors="black",
            s=160,
            linewidths=1.5,
            zorder=4,
        )
    for plan in drawn:
        axes.annotate(
            point_label(plan),
            (plan.tokens_per_second, plan.cost_per_million_tokens),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize=8,
        )
    for accelerator, color in _COLORS.items():
        if any(p.accelerator == accelerator for p in drawn):
            axes.scatter([], [], color=color, label=accelerator)
    axes.set_xscale("log")
    axes.set_xlabel("decode tokens/s per node (memory-bandwidth bound unless measured)")
    axes.set_ylabel("$ per 1M generated tokens (on-demand)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    if drawn:
        axes.legend(loc="upper right")
    figure.tight_layout()
    return figure


def save_png(figure: Figure, path: Path) -> None:
    """Write the figure as PNG, creating the parent directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")


def plot_candidates(
    model_name: str,
    arch: ModelArchitecture,
    max_model_len: int,
    max_num_seqs: int,
    selected: ConfigurationPlan | None,
    path: Path,
    json_output: bool,
    output: Path | None,
) -> None:
    """Draw the candidates (and ``selected``); list them unless a configuration was given."""
    points = planning.candidates(model_name, arch, max_model_len, max_num_seqs)
    if not points and selected is None:
        raise CommandFailed(
            f"{model_name} fits on no catalog instance at max_model_len {max_model_len} and "
            f"max_num_seqs {max_num_seqs}; lower them"
        )
    figure = cost_throughput_figure(
        points,
        title=f"{model_name}: cost vs decode throughput "
        f"(max_model_len {max_model_len}, max_num_seqs {max_num_seqs})",
        selected=selected,
    )
    try:
        save_png(figure, path)
    except OSError as error:
        raise CommandFailed(f"cannot write {path}: {error.strerror or error}") from None
    typer.echo(f"wrote {path} ({len(points)} candidates)", err=True)
    if selected is None:
        if json_output:
            emit(json.dumps([p.as_json() for p in points], indent=2), output)
        else:
            out = console.stdout()
            for point in points:
                out.print(
                    f"{point.label:24} {point.tokens_per_second:>10,.0f} tok/s "
                    f"${point.price_per_hour:>8,.2f}/h  ${point.cost_per_million_tokens:,.2f}/1M"
                )
