"""A spec built in a user's own app that breaks the rules raises ``eks_inference.SpecError``.

Its text is the one line the reference app and ``eks-inference plan`` print, field path first,
where pydantic's report would end a traceback in ``[type=deployment_rule, input_value=1,
input_type=int]``. It is a ``ValidationError`` (so a ``ValueError``), with every error kept.
Run in a process of its own, as a user's app runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from eks_inference import ModelDeploymentSpec, NodePool, PlatformSpec, SpecError
from tests.helpers.platforms import REPO

_APP = textwrap.dedent(
    """
    from eks_inference import NodePool, PlatformSpec

    system = NodePool(name="system", instance_types=("m6i.2xlarge",), min_size=1)
    gpus = NodePool(name="g6e", instance_types=("g6e.2xlarge",), max_size=2)
    PlatformSpec(
        model_bucket_name="my-org-llm-weights",
        node_pools=(system, gpus),
        deployments=[
            {
                "name": "llama",
                "model": "llama-3.1-70b",
                "instance_type": "g6e.2xlarge",
                "engine": "vllm",
                "tensor_parallel_size": 1,
                "weights": {"prefix": "models/llama/", "loader": "runai_streamer"},
            }
        ],
    )
    """
)


def test_a_users_app_ends_in_one_line_naming_the_field() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", _APP],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    assert completed.returncode == 1
    last = completed.stderr.splitlines()[-1]
    assert last.startswith(
        "eks_inference.specification.validation.SpecError: deployments.0.tensor_parallel_size: "
        "weights ("
    ), last
    assert "type=deployment_rule" not in completed.stderr


def test_the_error_is_a_validation_error_with_its_errors() -> None:
    with pytest.raises(SpecError) as caught:
        NodePool(name="gpus", instance_types=("g6e.2xlarge",), min_size=3, max_size=2)
    error = caught.value
    assert isinstance(error, ValidationError)
    assert isinstance(error, ValueError)
    assert str(error) == "min_size (3) exceeds max_size (2)"
    (detail,) = error.errors()
    assert detail["input"]["min_size"] == 3


def test_a_platform_file_read_raises_it_too(tmp_path: Path) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text("model_bucket_name: my-org-llm-weights\n")
    with pytest.raises(SpecError, match=r"^node_pools: Field required$"):
        PlatformSpec.from_yaml(path)


def test_a_deployment_built_alone_raises_it_with_every_problem_on_one_line() -> None:
    with pytest.raises(SpecError) as caught:
        ModelDeploymentSpec(
            name="llama",
            model="llama-3-8b",
            instance_type="g6e.xlarge",
            weights={"prefix": "models/llama/"},
            tensor_parallel_size=3,
            accelerator="gpu",
        )
    assert str(caught.value) == (
        "accelerator: unknown field; tensor_parallel_size: tensor_parallel_size 3 is not "
        "supported by the topology of g6e.xlarge (valid: [1]); degrees that work for this model "
        "on g6e.xlarge: [1]"
    )
    assert [detail["loc"] for detail in caught.value.errors()] == [
        ("accelerator",),
        ("tensor_parallel_size",),
    ]


def test_a_deployment_nested_in_a_platform_is_located_under_the_platform() -> None:
    with pytest.raises(SpecError, match=r"^deployments\.0\.tensor_parallel_size: "):
        PlatformSpec(
            model_bucket_name="my-org-llm-weights",
            node_pools=(
                NodePool(name="system", instance_types=("m6i.2xlarge",), min_size=1),
                NodePool(name="g6e", instance_types=("g6e.xlarge",), max_size=2),
            ),
            deployments=[
                {
                    "name": "llama",
                    "model": "llama-3-8b",
                    "instance_type": "g6e.xlarge",
                    "weights": {"prefix": "models/llama/"},
                    "tensor_parallel_size": 3,
                }
            ],
        )
