"""The README's dashboard picture is legible: no repeated tick labels, no title over a panel.

The picture is drawn as the README's command draws it (``render``); the figure it saves is
inspected as saved, with the extents matplotlib computed for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from eks_inference.observability.dashboards.picture import render
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.checks import found
from tests.helpers.platforms import REFERENCE_PLATFORM

_REFERENCE = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
# The README's picture, and a deployment on Inferentia2, whose panels differ.
SPECS = [_REFERENCE.deployment("qwen25-7b-g6e"), _REFERENCE.deployment("llama3-8b-inf2")]


@dataclass(frozen=True)
class Panel:
    """One panel as saved: its title's extent and its whole extent, with every tick label."""

    title: str
    title_extent: Bbox
    extent: Bbox
    tick_labels: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Drawing:
    """The saved picture: the extent of its header (the dashboard's title) and its panels."""

    header: Bbox
    panels: list[Panel]


def _visible_tick_labels(axis: Axis) -> tuple[str, ...]:
    locations = axis.get_majorticklocs()
    low, high = sorted(axis.get_view_interval())
    slack = (high - low) * 1e-9
    ticks = axis.get_major_ticks(len(locations))
    return tuple(
        tick.label1.get_text()
        for location, tick in zip(locations, ticks, strict=True)
        if low - slack <= location <= high + slack and tick.label1.get_visible()
    )


def _panel(axes: Axes) -> Panel:
    name = axes.get_title("left")
    (title,) = (c for c in axes.get_children() if isinstance(c, Text) and c.get_text() == name)
    extent = axes.get_tightbbox()
    assert name
    assert extent is not None
    axes_shown = (axes.xaxis, axes.yaxis) if axes.axison else ()
    return Panel(
        title=name,
        title_extent=title.get_window_extent(),
        extent=extent,
        tick_labels=tuple(_visible_tick_labels(axis) for axis in axes_shown),
    )


@pytest.fixture(scope="module", params=SPECS, ids=lambda spec: spec.name)
def drawn(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Drawing:
    """The picture ``render`` saves, measured as it is saved."""
    spec: ModelDeploymentSpec = request.param
    saved: list[Drawing] = []
    savefig: Callable[..., Any] = Figure.savefig

    def keep(figure: Figure, *args: Any, **kwargs: Any) -> Any:
        result = savefig(figure, *args, **kwargs)
        (header,) = figure.texts
        saved.append(Drawing(header.get_window_extent(), [_panel(a) for a in figure.axes]))
        return result

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(Figure, "savefig", keep)
        render(spec, tmp_path_factory.mktemp("picture") / "dashboard.png")
    (drawing,) = saved
    return drawing


def test_no_axis_repeats_a_tick_label(drawn: Drawing) -> None:
    for panel in drawn.panels:
        for labels in panel.tick_labels:
            assert len(set(labels)) == len(labels), (panel.title, labels)


def test_no_title_overlaps_another_panel(drawn: Drawing) -> None:
    for panel in drawn.panels:
        assert not panel.title_extent.overlaps(drawn.header), panel.title
        for other in found(o for o in drawn.panels if o is not panel):
            assert not panel.title_extent.overlaps(other.extent), (
                f"the title {panel.title!r} overlaps the panel {other.title!r}"
            )
