"""Multi-node platform files the CLI refuses: exit 2, one line, the field and the fix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REPO, platform_data

EXAMPLE = REPO / "examples" / "multi-node.yaml"
Edit = Callable[[dict[str, Any]], None]


def _llama(data: dict[str, Any]) -> dict[str, Any]:
    deployment: dict[str, Any] = data["deployments"][0]
    return deployment


def _one_node_too_few(data: dict[str, Any]) -> None:
    # The BF16 checkpoint (812 GB) and its KV cache on two p5.48xlarge (1152 GB usable).
    _llama(data).update(model="llama-3.1-405b", limits={"max_model_len": 65536})


def _tp_over_a_node(data: dict[str, Any]) -> None:
    _llama(data)["tensor_parallel_size"] = 16


def _tp_under_a_node(data: dict[str, Any]) -> None:
    _llama(data)["tensor_parallel_size"] = 4


def _without_efa(data: dict[str, Any]) -> None:
    data["node_pools"].append(
        {"name": "g6e-small", "instance_types": ["g6e.4xlarge"], "max_size": 8, "zones": [0]}
    )
    data["deployments"].append(
        {
            "name": "llama-8b-split",
            "model": "llama-3-8b",
            "instance_type": "g6e.4xlarge",
            "engine": "vllm",
            "tensor_parallel_size": 1,
            "multi_node": {"nodes_per_replica": 2},
            "weights": {"prefix": "models/llama-3-8b/", "loader": "runai_streamer"},
        }
    )


def _pool_too_small(data: dict[str, Any]) -> None:
    # Two groups of two nodes, and one group more during a rollout: six nodes.
    _llama(data)["scaling"] = {"min_replicas": 2, "max_replicas": 2}


def _across_zones(data: dict[str, Any]) -> None:
    data["node_pools"][1]["zones"] = [0, 1]


def _efa_turned_off(data: dict[str, Any]) -> None:
    data["node_pools"][1]["efa"] = False


def _more_stages_than_layers(data: dict[str, Any]) -> None:
    data["node_pools"][1]["max_size"] = 1000
    _llama(data)["multi_node"] = {"nodes_per_replica": 64}
    _llama(data)["model"] = {
        "id": "tiny/model",
        "architecture": {
            "family": "llama",
            "num_layers": 16,
            "hidden_size": 2048,
            "num_attention_heads": 32,
            "num_kv_heads": 8,
            "vocab_size": 32000,
            "num_parameters": 1_000_000_000,
            "max_position_embeddings": 32768,
        },
    }


def _on_another_engine(data: dict[str, Any]) -> None:
    _llama(data)["engine"] = "rayservice"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(
            _one_node_too_few,
            (
                "deployments.0.tensor_parallel_size: weights (",
                "GiB usable on 2 nodes x 8 GPUs of p5.48xlarge",
                "multi_node.nodes_per_replica 3",
            ),
            id="group-does-not-fit",
        ),
        pytest.param(
            _tp_over_a_node,
            (
                "deployments.0.tensor_parallel_size: tensor_parallel_size 16 is not supported "
                "by the topology of p5.48xlarge",
            ),
            id="tp-over-one-node",
        ),
        pytest.param(
            _tp_under_a_node,
            (
                "deployments.0.tensor_parallel_size: with multi_node each pod of a group "
                "takes a whole p5.48xlarge: set tensor_parallel_size to 8",
            ),
            id="tp-under-one-node",
        ),
        pytest.param(
            _without_efa,
            (
                "deployments.2.instance_type: g6e.4xlarge has no Elastic Fabric Adapter",
                "use an instance type with EFA (",
                "p5.48xlarge",
                "or set multi_node.allow_without_efa: true",
            ),
            id="multi-node-without-efa",
        ),
        pytest.param(
            _pool_too_small,
            (
                "node_pools.1.max_size: deployments ['llama-405b-fp8'] need up to 6 "
                "p5.48xlarge nodes",
                "set max_size >= 6",
            ),
            id="pool-too-small",
        ),
        pytest.param(
            _across_zones,
            (
                "node_pools.1.zones: deployment 'llama-405b-fp8' serves one replica across 2 "
                "nodes, which must share one Availability Zone",
                "set zones: [0]",
            ),
            id="group-spanning-zones",
        ),
        pytest.param(
            _efa_turned_off,
            (
                "node_pools.1.efa: pool 'p5' turns EFA off, but deployment 'llama-405b-fp8' "
                "serves one replica across 2 of its nodes",
                "remove efa: false, or set multi_node.allow_without_efa: true",
            ),
            id="group-on-efa-turned-off",
        ),
        pytest.param(
            _more_stages_than_layers,
            (
                "deployments.0.multi_node.nodes_per_replica: 64 nodes make 64 pipeline "
                "stages, but the model has 16 layers; set nodes_per_replica <= 16",
            ),
            id="more-stages-than-layers",
        ),
        pytest.param(
            _on_another_engine,
            (
                "deployments.0.multi_node: engine rayservice",
                "does not serve one replica across several nodes",
                "or use engine: vllm",
            ),
            id="engine-without-the-capability",
        ),
    ],
)
def test_bad_multi_node_platform(tmp_path: Path, edit: Edit, expected: tuple[str, ...]) -> None:
    data = platform_data(EXAMPLE)
    edit(data)
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, *expected)
