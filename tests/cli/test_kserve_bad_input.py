"""``engine: kserve`` platform files the CLI refuses: exit 2, one line, the field and the fix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REPO, platform_data

EXAMPLE = REPO / "examples" / "kserve-platform.yaml"


def _example_with(edit: Callable[[dict[str, Any]], None]) -> str:
    data = platform_data(EXAMPLE)
    edit(data["deployments"][0])
    return yaml.safe_dump(data, sort_keys=False)


def _vllm_at_zero(deployment: dict[str, Any]) -> None:
    deployment["engine"] = "vllm"
    deployment["scaling"] = {"min_replicas": 0, "max_replicas": 2, "autoscale": True}
    del deployment["options"]  # KServe's, which vLLM has none of


def _short_deadline(deployment: dict[str, Any]) -> None:
    deployment["options"] = {"progress_deadline_seconds": 300}


def _on_inferentia(deployment: dict[str, Any]) -> None:
    deployment.update(
        instance_type="inf2.48xlarge",
        tensor_parallel_size=8,
        weights={"prefix": "models/mistral-7b/"},
        neuron={"compiled_artifacts_prefix": "neuron-artifacts/"},
    )


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(
            _vllm_at_zero,
            (
                "deployments.0.scaling.min_replicas: engine vllm",
                "does not scale to zero",
                "set min_replicas >= 1, or use engine: rayservice or kserve",
            ),
            id="min-zero-without-scale-to-zero",
        ),
        pytest.param(
            _short_deadline,
            (
                "deployments.0.options.progress_deadline_seconds: 300 s is shorter "
                "than a cold start",
                "or remove it to use",
            ),
            id="deadline-shorter-than-the-load-budget",
        ),
        pytest.param(
            _on_inferentia,
            (
                "deployments.0.engine: engine kserve",
                "runs only on a GPU instance, not inf2.48xlarge",
                "or engine: vllm or rayservice",
            ),
            id="accelerator-it-cannot-run",
        ),
    ],
)
def test_bad_kserve_deployment(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], expected: tuple[str, ...]
) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(_example_with(edit))
    one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, *expected)
