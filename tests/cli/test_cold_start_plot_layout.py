"""``plan --cold-start-plot``: the legend covers no bar and no bar's label.

Measured as matplotlib draws it: the window extents of the legend, every bar segment, every
total written after a bar and the axis labels, from the Agg renderer of the figure.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.transforms import Bbox

from eks_inference.cli.cold_start_plot import cold_start_figure
from eks_inference.ops.plan import plan_platform
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO

PLATFORMS = [REFERENCE_PLATFORM, REPO / "examples" / "loaders.yaml"]


@pytest.mark.parametrize("platform", PLATFORMS, ids=lambda p: p.name)
def test_the_legend_covers_no_bar_and_no_label(platform: Path) -> None:
    plan = plan_platform(PlatformSpec.from_yaml(platform))
    figure = cold_start_figure(plan.deployments, title="cold start")
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    (axes,) = figure.axes
    # Wherever it is drawn: in the figure or in the axes.
    (legend,) = [*figure.legends, *([axes.get_legend()] if axes.get_legend() else [])]
    covered = legend.get_window_extent(renderer)
    bars = [patch.get_window_extent(renderer) for patch in axes.patches]
    totals = [text.get_window_extent(renderer) for text in axes.texts]
    ticks = [label.get_window_extent(renderer) for label in axes.get_yticklabels()]
    assert bars
    assert len(totals) == len(ticks) == sum(len(d.cold_starts) for d in plan.deployments)
    for drawn in [*bars, *totals, *ticks, axes.xaxis.label.get_window_extent(renderer)]:
        assert not covered.overlaps(drawn), (covered, drawn)
    # Outside the plotting area altogether, and inside the picture.
    assert not covered.overlaps(axes.get_window_extent(renderer))
    picture = Bbox.from_bounds(0, 0, *figure.canvas.get_width_height())
    assert picture.contains(covered.x0, covered.y0)
    assert picture.contains(covered.x1, covered.y1)
    # Every total fits inside the axes, the longest bar's too.
    inside = axes.get_window_extent(renderer)
    for total in totals:
        assert inside.x0 <= total.x0, (total, inside)
        assert total.x1 <= inside.x1, (total, inside)
