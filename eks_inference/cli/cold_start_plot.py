"""``plan --cold-start-plot``: seconds from a new node to serving, per deployment and loader.

One horizontal bar per deployment of the platform file and loader its engine supports on its
instance, stacked by phase (node launch, image pull, weights image, weights, engine start), the
deployment's own loader in bold. Drawn with matplotlib's object API on the Agg canvas, like
the cost plot. The phase legend sits outside the plotting area, under the axis label, so it
can cover no bar and no total, however long the longest bar; the x axis ends far enough past
the longest bar for its total to fit inside the axes.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from eks_inference.cli.plan_cells import COLD_START_PHASES
from eks_inference.ops.plan import DeploymentPlan

_PHASE_COLORS = {
    "node": "tab:gray",
    "image": "tab:blue",
    "weights_image": "tab:purple",
    "weights": "tab:orange",
    "engine": "tab:green",
}
# Room past the longest bar, as a share of it, for the total written after each bar.
_LABEL_ROOM = 0.12


def cold_start_figure(deployments: Sequence[DeploymentPlan], *, title: str) -> Figure:
    """Stacked bars of each deployment's cold start with each supported loader."""
    rows = [(d, estimate) for d in deployments for estimate in d.cold_starts]
    # Constrained layout makes room for a legend placed "outside" the axes.
    figure = Figure(figsize=(10, 2 + 0.45 * max(len(rows), 1)), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    labels = []
    for y, (deployment, estimate) in enumerate(rows):
        left = 0.0
        for phase in COLD_START_PHASES:
            seconds = estimate.seconds(phase)
            if seconds:
                axes.barh(y, seconds, left=left, color=_PHASE_COLORS[phase], height=0.6)
                left += seconds
        axes.annotate(
            f"{estimate.total_seconds:.0f} s",
            (left, y),
            textcoords="offset points",
            xytext=(4, -3),
            fontsize=8,
        )
        labels.append(f"{deployment.name}: {estimate.loader}")
    axes.set_yticks(range(len(rows)), labels, fontsize=8)
    own = {d.name: d.cold_start.loader for d in deployments if d.cold_start is not None}
    for tick, (deployment, estimate) in zip(axes.get_yticklabels(), rows, strict=True):
        if own.get(deployment.name) == estimate.loader:
            tick.set_fontweight("bold")
    axes.invert_yaxis()
    longest = max((estimate.total_seconds for _, estimate in rows), default=0.0)
    if longest > 0:
        axes.set_xlim(0, longest * (1 + _LABEL_ROOM))
    legend = [
        Patch(color=_PHASE_COLORS[phase], label=phase.replace("_", " "))
        for phase in COLD_START_PHASES
    ]
    figure.legend(
        handles=legend, loc="outside lower center", ncols=len(legend), fontsize=8, frameon=False
    )
    axes.set_xlabel("seconds from a new node to serving (estimate; bold: the loader in use)")
    axes.set_title(title)
    axes.grid(True, axis="x", alpha=0.3)
    return figure
