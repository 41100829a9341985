"""The fabric of a replica across nodes, read from the rendered pods: on nodes whose pool
attaches EFA each pod of a group takes every EFA interface of its node, libfabric's settings
for the instance type and the image that has aws-ofi-nccl; a single-node replica and a group
that accepts TCP get none of it."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from eks_inference import names
from eks_inference.charts.render import render_platform
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import VLLM_EFA_IMAGE, VLLM_GPU_IMAGE
from tests.helpers.objects import one
from tests.helpers.platforms import REPO
from tests.helpers.rendered import CONTEXT

EXAMPLE = REPO / "examples" / "multi-node.yaml"
# deployment -> (EFA interfaces of its instance type, GPUDirect RDMA over EFA)
FABRICS = {"llama-405b-fp8": (32, True), "qwen3-coder-480b": (4, False)}


def _example() -> dict[str, Any]:
    loaded = yaml.safe_load(EXAMPLE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _servers(platform: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The server container of the leader and of the worker of ``name``'s group."""
    objects = render_platform(PlatformSpec.model_validate(platform), CONTEXT)[name]
    template = one(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    servers = []
    for key in ("leaderTemplate", "workerTemplate"):
        (container,) = template[key]["spec"]["containers"]
        servers.append(container)
    return servers


def _environment(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize(("name", "fabric"), sorted(FABRICS.items()))
def test_every_pod_of_a_group_on_efa_nodes_takes_all_their_interfaces(
    name: str, fabric: tuple[int, bool]
) -> None:
    interfaces, rdma = fabric
    for server in _servers(_example(), name):
        resources = server["resources"]
        assert resources["requests"][names.EFA_RESOURCE] == str(interfaces)
        assert resources["limits"][names.EFA_RESOURCE] == str(interfaces)
        environment = _environment(server)
        assert environment["FI_PROVIDER"] == "efa"
        assert environment.get("FI_EFA_USE_DEVICE_RDMA") == ("1" if rdma else None)
        assert server["image"] == VLLM_EFA_IMAGE


def _without_fabric(server: dict[str, Any]) -> None:
    for amounts in server["resources"].values():
        assert names.EFA_RESOURCE not in amounts
    assert not {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"} & set(_environment(server))
    assert server["image"] == VLLM_GPU_IMAGE


def test_a_group_on_a_pool_that_turns_efa_off_talks_tcp_on_the_vllm_image() -> None:
    platform = _example()
    (pool,) = (p for p in platform["node_pools"] if p["name"] == "p5")
    pool["efa"] = False
    (deployment,) = (d for d in platform["deployments"] if d["name"] == "llama-405b-fp8")
    deployment["multi_node"]["allow_without_efa"] = True
    for server in _servers(platform, "llama-405b-fp8"):
        _without_fabric(server)
    # The other pool still attaches its fabric.
    for server in _servers(platform, "qwen3-coder-480b"):
        assert server["resources"]["limits"][names.EFA_RESOURCE] == "4"


def test_a_single_node_replica_on_an_efa_pool_takes_no_interface() -> None:
    platform = _example()
    platform["deployments"].append(
        {
            "name": "llama-70b",
            "model": "llama-3.1-70b",
            "instance_type": "p5.48xlarge",
            "engine": "vllm",
            "tensor_parallel_size": 8,
            "scaling": {"min_replicas": 1, "max_replicas": 1},
            "weights": {"prefix": "models/llama-3.1-70b-instruct/", "loader": "runai_streamer"},
        }
    )
    (pool,) = (p for p in platform["node_pools"] if p["name"] == "p5")
    pool["max_size"] = 6
    spec = PlatformSpec.model_validate(platform)
    (resolved,) = (p for p in spec.node_pools if p.name == "p5")
    assert resolved.efa_interfaces == 32
    deployment = one(render_platform(spec, CONTEXT)["llama-70b"], "Deployment")
    (server,) = deployment["spec"]["template"]["spec"]["containers"]
    _without_fabric(server)
