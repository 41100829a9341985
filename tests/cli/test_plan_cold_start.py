"""``plan``: the cold-start breakdown per loader in the JSON and the tables, and its plot."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from matplotlib.image import imread
from typer.testing import Result

from eks_inference.cli.cold_start_plot import cold_start_figure
from eks_inference.ops.plan import plan_platform
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO

Cli = Callable[..., Result]
EXAMPLE = REPO / "examples" / "loaders.yaml"


def test_the_json_carries_each_deployments_cold_start(cli: Cli) -> None:
    result = cli("plan", "--platform", EXAMPLE, "--json")
    assert result.exit_code == 0, result.stderr
    deployments = {d["name"]: d for d in json.loads(result.stdout)["deployments"]}
    for name, deployment in deployments.items():
        own = deployment["cold_start"]
        assert own in deployment["cold_start_by_loader"], name
        phases = [p["phase"] for p in own["phases"]]
        assert phases[0] == "node"
        assert phases[-1] == "engine"
        assert "weights" in phases
        for phase in own["phases"]:
            assert phase["seconds"] > 0
            assert phase["source"]
            assert phase["basis"]
        total = sum(p["seconds"] for p in own["phases"])
        assert abs(own["total_seconds"] - total) < 0.5
        assert deployment["recommended_loader"]["reason"]
    assert deployments["qwen25-1b5-image"]["cold_start"]["loader"] == "image"
    image_phases = [p["phase"] for p in deployments["qwen25-1b5-image"]["cold_start"]["phases"]]
    assert "weights_image" in image_phases
    assert deployments["mistral-7b-runai"]["recommended_loader"]["loader"] == "runai_streamer"


def test_the_tables_show_the_cold_start(cli: Cli) -> None:
    result = cli("plan", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 0, result.stderr
    assert "Cold start" in result.stdout
    assert "in use, recommended" in result.stdout


def test_the_cold_start_plot_is_a_png(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "cold" / "start.png"
    result = cli("plan", "--platform", EXAMPLE, "--cold-start-plot", path)
    assert result.exit_code == 0, result.stderr
    assert f"wrote {path}" in result.stderr
    height, width, _ = imread(path).shape
    assert width > 0
    assert height > 0


def test_the_plot_has_a_bar_per_deployment_and_loader() -> None:
    plan = plan_platform(PlatformSpec.from_yaml(EXAMPLE))
    figure = cold_start_figure(plan.deployments, title="loaders")
    (axes,) = figure.axes
    labels = [tick.get_text() for tick in axes.get_yticklabels()]
    assert labels == [f"{d.name}: {c.loader}" for d in plan.deployments for c in d.cold_starts]
    bold = [t.get_text() for t in axes.get_yticklabels() if t.get_fontweight() == "bold"]
    assert sorted(bold) == sorted(
        f"{d.name}: {d.cold_start.loader}" for d in plan.deployments if d.cold_start
    )


def test_the_cold_start_plot_plans_the_platform_only(cli: Cli, tmp_path: Path) -> None:
    result = cli("plan", "--model", "llama-3-8b", "--cold-start-plot", tmp_path / "x.png")
    assert result.exit_code == 2
    assert "--cold-start-plot" in result.stderr
