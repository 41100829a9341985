"""Disaggregation across nodes without a transport, through the console script: a Dynamo
graph whose workers outgrow one node is refused, exit 2, in one line naming the field and
what would work, wherever EFA cannot carry its KV cache (the pool turns EFA off, spans
zones or holds too few nodes, the instance type has none) or a worker's share of its node's
EFA interfaces is not whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REPO

EXAMPLE = REPO / "examples" / "dynamo-efa.yaml"


def _plan(tmp_path: Path, data: dict[str, Any]) -> Any:
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    return run_cli("plan", "--platform", path, cwd=tmp_path)


def _example() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    assert isinstance(data, dict)
    return data


def test_the_example_plans(tmp_path: Path) -> None:
    result = _plan(tmp_path, _example())
    assert result.returncode == 0, result.stderr


def test_a_graph_across_nodes_on_a_pool_that_turns_efa_off_is_refused(tmp_path: Path) -> None:
    data = _example()
    data["node_pools"][1]["efa"] = False
    one_line_error(
        _plan(tmp_path, data),
        2,
        "node_pools.1.efa",
        "deployment 'llama-70b-efa' serves prefill and decode on more GPUs than one "
        "g6e.48xlarge holds",
        "pool 'g6e-48xl' turns EFA off (TCP is not admitted for it)",
        "set efa: true (or remove efa)",
        "within 8 GPUs",
    )


def test_a_graph_across_nodes_on_an_instance_type_without_efa_is_refused(
    tmp_path: Path,
) -> None:
    # One L40S per g6e.2xlarge, which has no EFA: a prefill and a decode worker are two nodes.
    data = _example()
    data["node_pools"][1] = {"name": "g6e-2xl", "instance_types": ["g6e.2xlarge"], "max_size": 2}
    data["deployments"][0] = {
        "name": "mistral-7b-disagg",
        "model": "mistral-7b",
        "instance_type": "g6e.2xlarge",
        "engine": "dynamo",
        "options": {"mode": "disaggregated"},
        "weights": {"prefix": "models/mistral-7b/"},
    }
    one_line_error(
        _plan(tmp_path, data),
        2,
        "deployments.0.options.prefill.replicas",
        "needs 2 GPUs, more than one g6e.2xlarge (1)",
        "it has no EFA, and TCP cannot carry GiB of KV cache per request in time",
        "keep prefill and decode within 1 GPUs, or use an instance type with EFA (",
        "p5.48xlarge",
    )


def test_a_worker_whose_share_of_the_efa_interfaces_is_not_whole_is_refused(
    tmp_path: Path,
) -> None:
    # g6e.12xlarge: 4 GPUs and 1 EFA interface, so a worker of 2 GPUs would take half of it.
    data = _example()
    data["node_pools"][1] = {
        "name": "g6e-12xl",
        "instance_types": ["g6e.12xlarge"],
        "zones": [0],
        "max_size": 2,
    }
    data["deployments"][0] = {
        "name": "llama-8b-disagg",
        "model": "llama-3-8b",
        "instance_type": "g6e.12xlarge",
        "engine": "dynamo",
        "options": {
            "mode": "disaggregated",
            "prefill": {"replicas": 2, "tensor_parallel_size": 2},
            "decode": {"replicas": 1, "tensor_parallel_size": 4},
        },
        "weights": {"prefix": "models/llama-3-8b/"},
    }
    line = one_line_error(
        _plan(tmp_path, data),
        2,
        "deployments.0.options.prefill.tensor_parallel_size",
        "the 1 EFA interfaces of a g6e.12xlarge (4 GPUs), and at TP 2 that is 1/2",
        "use tensor_parallel_size one of [4]",
    )
    assert "options.decode" not in line


def test_a_graph_across_nodes_on_a_pool_across_zones_is_refused(tmp_path: Path) -> None:
    data = _example()
    del data["node_pools"][1]["zones"]
    one_line_error(
        _plan(tmp_path, data),
        2,
        "node_pools.1.zones",
        "the nodes of a pool with EFA share one Availability Zone",
        "spans every zone (no zones set)",
        "set zones: [0]",
    )


def test_a_graph_across_nodes_on_a_pool_too_small_for_it_is_refused(tmp_path: Path) -> None:
    data = _example()
    data["node_pools"][1]["max_size"] = 1
    one_line_error(
        _plan(tmp_path, data),
        2,
        "node_pools.1.max_size",
        "its workers need at least 2 g6e.48xlarge nodes",
        "set max_size >= 2",
    )
