"""A disaggregated graph whose workers span nodes (``examples/dynamo-efa.yaml``, and the same
graph on p5): it validates against the pinned DynamoGraphDeployment schema and Kubernetes
1.35; each worker takes its share of its node's EFA interfaces, the settings Dynamo's EFA
guide requires (tests/upstream/dynamo-efa-guide-vllm-worker.txt), the EFA runtime image and
arguments the recorded worker parser accepts; no worker prefers another's node; the pool
attaches EFA for it; ``plan`` prices the transfer; and a graph on one node is unchanged."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import kubernetes_validate
import pytest
import yaml

from eks_inference import names
from eks_inference.catalog import INSTANCE_TYPES, MODELS, sizing
from eks_inference.catalog.node_hardware import node_hardware
from eks_inference.charts.render import render_platform
from eks_inference.engines.dynamo.rules import kv_transport
from eks_inference.specification.engines import kv_cache_crosses_nodes, kv_cache_nodes
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import (
    DYNAMO_EFA_RUNTIME_IMAGE,
    DYNAMO_EFA_VLLM_VERSION,
    DYNAMO_RUNTIME_IMAGE,
    DYNAMO_VERSION,
    DYNAMO_VLLM_VERSION,
    KUBERNETES_VERSION,
)
from tests.helpers.checks import found
from tests.helpers.cli import run_cli
from tests.helpers.objects import component_pod_template, crd_validator, one, schema_errors
from tests.helpers.platforms import CRDS, REPO, UPSTREAM
from tests.helpers.rendered import CONTEXT
from tests.helpers.vllm_args import ServeOption, serve_args_problems, split_known, table_rows

EXAMPLE = REPO / "examples" / "dynamo-efa.yaml"
ONE_NODE_EXAMPLE = REPO / "examples" / "dynamo.yaml"
DGD_CRD = CRDS / "nvidia.com_dynamographdeployments.yaml"
WORKER_OPTIONS = UPSTREAM / f"dynamo-{DYNAMO_VERSION}-vllm-worker-options.txt"
EFA_GUIDE = UPSTREAM / "dynamo-efa-guide-vllm-worker.txt"
NAME = "llama-70b-efa"
WORKERS = ("prefill", "decode")
# The guide's settings the pods do not carry as it writes them, each for a reason:
# GPUDirect RDMA only where the instance type reads GPU memory over EFA (elsewhere asking for
# it fails: charts/fabric.py), so g6e's workers leave it out.
NOT_ON_G6E = frozenset({"FI_EFA_USE_DEVICE_RDMA"})


def _data(instance_type: str = "g6e.48xlarge") -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    assert isinstance(data, dict)
    if instance_type != "g6e.48xlarge":
        data["node_pools"][1]["instance_types"] = [instance_type]
        data["deployments"][0]["instance_type"] = instance_type
    return data


@cache
def _platform(instance_type: str = "g6e.48xlarge") -> PlatformSpec:
    return PlatformSpec.model_validate(_data(instance_type))


@cache
def _graph(instance_type: str = "g6e.48xlarge") -> dict[str, Any]:
    objects = render_platform(_platform(instance_type), CONTEXT)[NAME]
    return dict(one(objects, "DynamoGraphDeployment"))


def _components(instance_type: str = "g6e.48xlarge") -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _graph(instance_type)["spec"]["components"]}


def _main(component: dict[str, Any]) -> dict[str, Any]:
    (container,) = component["podTemplate"]["spec"]["containers"]
    return dict(container)


def _environment(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def _guide(kind: str) -> dict[str, str]:
    return {name: value for row_kind, name, value in table_rows(EFA_GUIDE) if row_kind == kind}


def test_the_example_spans_two_nodes_and_its_pool_attaches_efa() -> None:
    platform = _platform()
    (spec,) = platform.deployments
    assert kv_cache_crosses_nodes(spec)
    assert kv_cache_nodes(spec) == 2
    pool = platform.pool_for(spec)
    # The pool says nothing of EFA; the graph across nodes turns it on.
    assert "efa" not in pool.model_fields_set
    assert (pool.efa, pool.efa_interfaces) == (True, 4)


@pytest.mark.parametrize("instance_type", ["g6e.48xlarge", "p5.48xlarge"])
def test_the_graph_and_its_pods_validate_strictly(instance_type: str) -> None:
    graph = _graph(instance_type)
    assert schema_errors(crd_validator(DGD_CRD, "v1beta1"), graph) == []
    for component in found(graph["spec"]["components"]):
        template = component_pod_template(NAME, component)
        assert kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("instance_type", "interfaces"),
    # 4 GPUs of 8: half of g6e.48xlarge's 4 interfaces, half of p5's 32.
    [("g6e.48xlarge", 2), ("p5.48xlarge", 16)],
)
def test_each_worker_takes_its_share_of_its_nodes_efa_interfaces(
    instance_type: str, interfaces: int
) -> None:
    instance = INSTANCE_TYPES[instance_type]
    for role in WORKERS:
        resources = _main(_components(instance_type)[role])["resources"]
        for amounts in (resources["requests"], resources["limits"]):
            assert amounts[names.EFA_RESOURCE] == str(interfaces)
            assert amounts["nvidia.com/gpu"] == "4"
        assert interfaces * instance.cores == instance.efa_interfaces * 4
    # The resource the guide's pods request, which the EFA device plugin advertises.
    assert set(_guide("resource")) == {names.EFA_RESOURCE}
    frontend = _main(_components(instance_type)["frontend"])
    assert names.EFA_RESOURCE not in frontend["resources"]["limits"]


@pytest.mark.parametrize("instance_type", ["g6e.48xlarge", "p5.48xlarge"])
def test_each_worker_carries_the_settings_the_efa_guide_requires(instance_type: str) -> None:
    rdma = INSTANCE_TYPES[instance_type].efa_rdma
    wanted = {
        name: value
        for name, value in found(_guide("env").items())
        if rdma or name not in NOT_ON_G6E
    }
    assert {"FI_PROVIDER", "FI_EFA_ENABLE_SHM_TRANSFER", "FI_EFA_ENABLE_SHM"} <= set(wanted)
    transfer = {name: json.loads(value) for name, value in _guide("kv-transfer-config").items()}
    assert transfer["kv_connector_extra_config"] == {"backends": ["LIBFABRIC"]}
    for role in WORKERS:
        main = _main(_components(instance_type)[role])
        environment = _environment(main)
        assert {name: environment.get(name) for name in wanted} == wanted
        assert ("FI_EFA_USE_DEVICE_RDMA" in environment) is rdma
        args = main["args"]
        assert json.loads(args[args.index("--kv-transfer-config") + 1]) == transfer
        assert main["image"] == DYNAMO_EFA_RUNTIME_IMAGE
    assert _main(_components(instance_type)["frontend"])["image"] == DYNAMO_RUNTIME_IMAGE


def test_the_efa_image_is_checked_against_the_recorded_worker_parser() -> None:
    """The EFA image ships the same vLLM as the pinned release, whose recorded worker parser
    (Dynamo's own options, then vLLM's) accepts every worker's arguments."""
    assert DYNAMO_EFA_VLLM_VERSION == DYNAMO_VLLM_VERSION
    dynamo: dict[str, ServeOption] = {}
    vllm: dict[str, ServeOption] = {}
    for parser, *row in table_rows(WORKER_OPTIONS):
        (dynamo if parser == "dynamo" else vllm)[row[0]] = ServeOption(*row)
    for role in WORKERS:
        ours, engine = split_known(_main(_components()[role])["args"], dynamo)
        assert "--disaggregation-mode" in ours
        assert "--kv-transfer-config" in engine
        assert serve_args_problems(ours, dynamo, positional=False) == [], role
        assert serve_args_problems(engine, vllm, positional=False) == [], role


def test_no_worker_of_a_graph_across_nodes_prefers_another_workers_node() -> None:
    for role in WORKERS:
        assert "affinity" not in _components()[role]["podTemplate"]["spec"]


def test_a_graph_on_one_node_keeps_pcie_its_affinity_and_its_image() -> None:
    platform = PlatformSpec.from_yaml(ONE_NODE_EXAMPLE)
    spec = platform.deployment("llama-70b-disagg")
    assert not kv_cache_crosses_nodes(spec)
    # Its pool hosts no graph across nodes: EFA stays off.
    assert platform.pool_for(spec).efa is None
    assert kv_transport(spec) == "one node, PCIe (NIXL)"
    components = {
        c["name"]: c
        for c in one(render_platform(platform, CONTEXT)[spec.name], "DynamoGraphDeployment")[
            "spec"
        ]["components"]
    }
    for role in WORKERS:
        main = _main(components[role])
        assert main["image"] == DYNAMO_RUNTIME_IMAGE
        assert names.EFA_RESOURCE not in main["resources"]["limits"]
        assert not {n for n in _environment(main) if n.startswith("FI_")}
        config = json.loads(main["args"][main["args"].index("--kv-transfer-config") + 1])
        assert "kv_connector_extra_config" not in config
        assert "podAffinity" in components[role]["podTemplate"]["spec"]["affinity"]


def test_plan_says_the_transport_and_what_one_prompt_costs(tmp_path: Any) -> None:
    result = run_cli("plan", "--platform", EXAMPLE, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (plan,) = json.loads(result.stdout)["deployments"]
    split = plan["split"]
    assert (split["accelerators"], split["nodes"]) == (16, 2)
    # A worker on 4 of 8 GPUs has 2 of the node's 4 interfaces: half of its 400 Gbps. One
    # 8192-token prompt of Llama-3.1-70B is 80 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
    # = 320 KiB a token, 2.50 GiB, which takes 2.5 x 2^30 x 8 / 200e9 s = 107 ms.
    model = MODELS["llama-3.1-70b"].architecture
    prompt = sizing.kv_cache_bytes_per_token(model) * 8192
    assert prompt == 320 * 1024 * 8192
    gbps = node_hardware("g6e.48xlarge").network_gbps / 2
    assert gbps == 200
    assert split["transport"] == (
        "across nodes, EFA (NIXL libfabric, staged in host memory): 200 Gbps/worker, "
        f"2.50 GiB per 8192-token prompt in {prompt * 8 / (gbps * 1e9) * 1000:.0f} ms"
    )
    assert "107 ms" in split["transport"]


def test_on_p5_the_transfer_is_gpudirect_at_its_share_of_3200_gbps() -> None:
    (spec,) = _platform("p5.48xlarge").deployments
    assert kv_transport(spec) == (
        "across nodes, EFA (NIXL libfabric): 1600 Gbps/worker, 2.50 GiB per 8192-token "
        "prompt in 13 ms"
    )


def test_an_autoscaled_graph_that_may_cross_nodes_is_configured_for_efa_from_the_start() -> None:
    """Judged at max_replicas: at 2 x (TP 4 + TP 4) the graph needs two nodes, so its first
    workers, one per group at min_replicas, already take EFA and the libfabric backend."""
    data = _data()
    deployment = data["deployments"][0]
    deployment["scaling"] = {"min_replicas": 1, "max_replicas": 2, "autoscale": True}
    deployment["options"]["prefill"] = {"tensor_parallel_size": 4}
    deployment["options"]["decode"] = {"tensor_parallel_size": 4}
    platform = PlatformSpec.model_validate(data)
    (spec,) = platform.deployments
    assert kv_cache_nodes(spec) == 2
    graph = one(render_platform(platform, CONTEXT)[NAME], "DynamoGraphDeployment")
    workers = [c for c in graph["spec"]["components"] if c["name"] in WORKERS]
    for component in found(workers):
        # The scaling adapter owns the count: the graph states none.
        assert "replicas" not in component
        main = _main(component)
        assert main["resources"]["limits"][names.EFA_RESOURCE] == "2"
        assert main["image"] == DYNAMO_EFA_RUNTIME_IMAGE
        assert "LIBFABRIC" in main["args"][main["args"].index("--kv-transfer-config") + 1]
