"""``plan --plot``: the candidate list, the labelled figure and a valid PNG file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from matplotlib.image import imread
from typer.testing import Result

from eks_inference.catalog import INSTANCE_TYPES, MODELS, Accelerator, sizing
from eks_inference.cli.plot import cost_throughput_figure, point_label
from eks_inference.ops import plan

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LLAMA = MODELS["llama-3-8b"].architecture


def test_candidates_are_the_accelerator_instances_the_model_fits_on() -> None:
    found = plan.candidates("llama-3-8b", LLAMA)
    names = {c.instance_type for c in found}
    assert {"inf2.48xlarge", "inf2.24xlarge", "g6e.xlarge", "g5.12xlarge", "p4d.24xlarge"} <= names
    # Weights (15 GiB) plus 16 GiB of KV cache exceed one inf2 chip at the default shape.
    assert "inf2.xlarge" not in names
    assert all(INSTANCE_TYPES[n].accelerator is not Accelerator.NONE for n in names)
    assert len(names) == len(found), "one point per instance type"
    for c in found:
        assert c.fits
        assert (
            sizing.tensor_parallel_problem(
                LLAMA, INSTANCE_TYPES[c.instance_type], c.tensor_parallel_size
            )
            is None
        )
    costs = [c.cost_per_million_tokens for c in found]
    assert costs == sorted(costs)


def test_candidates_follow_the_batch_shape() -> None:
    small = {c.instance_type for c in plan.candidates("llama-3-8b", LLAMA, 1024, 4)}
    assert "inf2.xlarge" in small


def test_figure_labels_every_candidate() -> None:
    found = plan.candidates("llama-3-8b", LLAMA)
    selected = plan.plan_configuration(
        "llama-3-8b", LLAMA, INSTANCE_TYPES["inf2.48xlarge"], 8, measured_tokens_per_second=3120
    )
    figure = cost_throughput_figure(found, title="t", selected=selected)
    texts = {t.get_text() for t in figure.axes[0].texts}
    assert {point_label(c) for c in found} <= texts
    assert "inf2.48xlarge TP8 (measured)" in texts


def test_plot_writes_a_valid_png(cli: Callable[..., Result], tmp_path: Path) -> None:
    path = tmp_path / "plots" / "llama.png"
    result = cli("plan", "--model", "llama-3-8b", "--plot", path)
    assert result.exit_code == 0, result.stderr
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 20_000
    pixels = imread(path)
    height, width = pixels.shape[:2]
    assert (width, height) == (1000, 650)
    # Not a blank canvas: the figure has more than a handful of distinct colours.
    assert len({tuple(p) for p in pixels.reshape(-1, pixels.shape[2])[::97]}) > 10
    assert "inf2.48xlarge TP4" in result.stdout


def test_plot_with_a_selected_configuration(cli: Callable[..., Result], tmp_path: Path) -> None:
    path = tmp_path / "selected.png"
    result = cli(
        "plan",
        "--model",
        "llama-3-8b",
        "--instance-type",
        "g5.12xlarge",
        "--tensor-parallel",
        "4",
        "--measured-tokens-per-second",
        "1240",
        "--plot",
        path,
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    assert '"cost_per_million_tokens": 1.27' in result.stdout


@pytest.mark.parametrize("args", [("--plot", "x.png"), ("--instance-type", "inf2.48xlarge")])
def test_configuration_options_need_a_model(
    cli: Callable[..., Result], args: tuple[str, ...]
) -> None:
    result = cli("plan", *args)
    assert result.exit_code == 2
    assert result.stderr == f"error: {args[0]} needs --model\n"
