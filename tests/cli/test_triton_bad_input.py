"""Bad Triton repositories and traffic splits through the CLI: exit code 2 and one ``error:``
line naming the field and the fix, before anything is built."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import Result

from tests.helpers.errors import one_line_error
from tests.helpers.platforms import EXAMPLES_DIR, platform_data

EXAMPLE = EXAMPLES_DIR / "triton-canary.yaml"


def _triton(data: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = data["deployments"][0]
    assert found["engine"] == "triton"
    return found


def _no_version(data: dict[str, Any]) -> None:
    del _triton(data)["options"]["models"][1]["versions"]


def _pinned_image(data: dict[str, Any]) -> None:
    del _triton(data)["options"]["image"]


def _image_by_tag(data: dict[str, Any]) -> None:
    image = _triton(data)["options"]["image"]
    image["uri"] = image["uri"].split("@", 1)[0]


def _too_large(data: dict[str, Any]) -> None:
    _triton(data)["options"]["models"][1]["gpu_memory_mib"] = 12_288


def _weights(data: dict[str, Any]) -> None:
    data["endpoint"]["splits"][0]["traffic"][0]["weight"] = 80


def _unexposed(data: dict[str, Any]) -> None:
    data["deployments"][2]["endpoint"] = {"expose": False}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            _no_version,
            ("deployments.0.options.models.1.versions:", "versions: [1]"),
            id="no-version",
        ),
        pytest.param(
            _pinned_image,
            ("deployments.0.options.models.1.backend:", "name it in options.image"),
            id="backend-not-in-image",
        ),
        pytest.param(
            _image_by_tag,
            (
                "deployments.0.options.image.uri:",
                "is not pinned by digest (a tag can later name another build); pin it by "
                "digest: 111122223333.dkr.ecr.us-east-1.amazonaws.com/triton-vllm-onnx:25.11"
                "@sha256:<digest>",
            ),
            id="image-without-digest",
        ),
        pytest.param(
            _too_large,
            ("deployments.0.options.models:", "lower limits.gpu_memory_utilization to"),
            id="models-do-not-fit",
        ),
        pytest.param(
            _weights,
            ("endpoint.splits.0.traffic:", "must sum to 100: e.g. set the last weight to 20"),
            id="weights-not-100",
        ),
        pytest.param(
            _unexposed,
            (
                "endpoint.splits.0.traffic.1.deployment:",
                "expose it, or take it out of the split",
            ),
            id="unexposed-target",
        ),
    ],
)
def test_bad_triton_and_split_input_exits_2(
    tmp_path: Path,
    cli: Callable[..., Result],
    change: Callable[[dict[str, Any]], None],
    expected: tuple[str, ...],
) -> None:
    data = platform_data(EXAMPLE)
    change(data)
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = cli("plan", "--platform", str(path))
    line = one_line_error(result, 2, *expected)
    assert line.startswith(f"error: invalid platform file {path}")
