"""The cold-start estimate: the published anchors reproduced from catalog data, the load budget
held against it, and the design documents' loader recommendation.

Tolerance: 10 % of each anchor. The estimate computes from the catalog (instance network
bandwidth, instance store, image sizes, the anchors' rates), so a catalog change that moves
an anchor's figure by more than that fails here.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from eks_inference.catalog import GB, INSTANCE_TYPES, Accelerator, ModelArchitecture, sizing
from eks_inference.catalog import cold_start_figures as figures
from eks_inference.catalog.node_hardware import NODE_HARDWARE, node_hardware
from eks_inference.specification import startup_budget as load_budget
from eks_inference.specification.cold_start import (
    cold_start,
    cold_starts,
    local_disk,
    recommended_loader,
)
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.weights import LOADERS
from tests.helpers.platforms import REPO

REFERENCE = PlatformSpec.from_yaml(REPO / "deployments.yaml")
EXAMPLE = PlatformSpec.from_yaml(REPO / "examples" / "loaders.yaml")
TOLERANCE = 0.10
# The load budgets of the reference deployments before cold starts were estimated: the
# estimate feeds the budget as a floor, and moves none of them.
REFERENCE_BUDGETS = {
    "llama3-8b-inf2": (1290, 2190),
    "mistral-7b-g6e": (681, 1581),
    "qwen25-7b-g6e": (686, 1586),
}


def _model_of(size_bytes: float) -> ModelArchitecture:
    """A bf16 architecture whose weights are ``size_bytes``."""
    return ModelArchitecture(
        family="llama",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        vocab_size=128256,
        num_parameters=round(size_bytes / 2),
        max_position_embeddings=8192,
    )


def _spec(size_bytes: float, instance_type: str, **weights: Any) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate(
        {
            "name": "anchor",
            "model": {"id": "anchor/model", "architecture": _model_of(size_bytes)},
            "instance_type": instance_type,
            "engine": "vllm",
            "limits": {"max_model_len": 2048, "max_num_seqs": 4},
            "weights": {"prefix": "models/anchor/", "loader": "runai_streamer", **weights},
        }
    )


def _close(value: float, anchor: float) -> bool:
    return abs(value - anchor) <= TOLERANCE * anchor


def test_the_streamer_anchor_is_reproduced() -> None:
    """10.4 GB into GPU memory in 5.0 s with the Run:ai streamer on g6e.4xlarge."""
    spec = _spec(figures.RUNAI_ANCHOR_BYTES.value, figures.RUNAI_ANCHOR_INSTANCE)
    seconds = cold_start(spec, "runai_streamer").seconds("weights")
    assert _close(seconds, figures.RUNAI_ANCHOR_SECONDS.value), seconds


def test_the_image_pull_anchor_is_reproduced() -> None:
    """An 8.8 GB image pulled in 48 s: the weights image of the image loader at that size."""
    spec = _spec(figures.IMAGE_ANCHOR_BYTES.value, "g6e.4xlarge")
    seconds = cold_start(spec, "image").seconds("weights_image")
    assert _close(seconds, 48.0), seconds


def test_local_nvme_and_ebs_read_as_published() -> None:
    """About 30 GB/s from the NVMe instance store against about 1 GB/s from EBS: the image
    loader's copy and read take thirty times longer on inf2 (EBS only) than on g6e."""
    assert _close(local_disk(node_hardware("g6e.4xlarge")).value, 30 * GB)
    assert _close(local_disk(node_hardware("inf2.8xlarge")).value, 1 * GB)
    size = 4 * GB
    nvme = cold_start(_spec(size, "g6e.4xlarge"), "image").seconds("weights")
    assert _close(nvme, 2 * size / (30 * GB)), nvme


def test_a_node_is_ready_in_about_thirty_seconds() -> None:
    spec = _spec(4 * GB, "g6e.2xlarge")
    assert _close(cold_start(spec).seconds("node"), 30.0)


def test_every_phase_names_its_source_and_basis() -> None:
    for spec in (*REFERENCE.deployments, *EXAMPLE.deployments):
        for estimate in cold_starts(spec):
            names = [p.name for p in estimate.phases]
            assert names[0] == "node", names
            assert names[-1] == "engine", names
            for phase in estimate.phases:
                assert phase.seconds > 0, (spec.name, estimate.loader, phase)
                assert phase.source, phase
                assert phase.basis, phase
            assert estimate.total_seconds == pytest.approx(sum(p.seconds for p in estimate.phases))


def test_the_catalog_has_the_hardware_of_every_instance_type() -> None:
    """Network, instance store and NUMA layout for every catalog instance type: g6e sizes
    have local NVMe, Inferentia2 none; accelerators split evenly across NUMA nodes."""
    assert set(NODE_HARDWARE) == set(INSTANCE_TYPES)
    for name, instance in INSTANCE_TYPES.items():
        hardware = NODE_HARDWARE[name]
        assert hardware.numa_nodes * hardware.devices_per_numa_node == instance.devices, name
        assert instance.vcpus % hardware.numa_nodes == 0, name
        if instance.family == "g6e":
            assert hardware.has_instance_store, name
        if instance.accelerator is Accelerator.NEURON:
            assert not hardware.has_instance_store, name


@pytest.mark.parametrize("deployment", REFERENCE.deployments, ids=lambda d: d.name)
def test_reference_budgets_are_unchanged(deployment: ModelDeploymentSpec) -> None:
    load, rollout = REFERENCE_BUDGETS[deployment.name]
    assert load_budget.model_load_seconds(deployment) == load
    assert load_budget.rollout_seconds(deployment) == rollout


@pytest.mark.parametrize(
    "deployment", [*REFERENCE.deployments, *EXAMPLE.deployments], ids=lambda d: d.name
)
def test_the_budget_holds_three_estimates(deployment: ModelDeploymentSpec) -> None:
    """What the probes, do-not-disrupt and alerts allow is at least three estimates."""
    estimate = cold_start(deployment)
    margin = load_budget.ESTIMATE_MARGIN
    loading = estimate.seconds("weights") + estimate.seconds("engine")
    assert load_budget.model_load_seconds(deployment) >= margin * loading
    pulling = estimate.seconds("weights_image")
    assert load_budget.image_seconds(deployment) >= load_budget.NODE_AND_IMAGE_SECONDS
    assert load_budget.image_seconds(deployment) >= margin * pulling
    assert load_budget.rollout_seconds(deployment) >= margin * (loading + pulling)


def test_the_image_loader_pull_raises_the_rollout_budget() -> None:
    image = EXAMPLE.deployment("qwen25-1b5-image")
    pull = cold_start(image).seconds("weights_image")
    assert pull > 0
    assert load_budget.image_seconds(image) == load_budget.NODE_AND_IMAGE_SECONDS + math.ceil(
        load_budget.ESTIMATE_MARGIN * pull
    )


def test_every_loader_has_an_estimate() -> None:
    spec = _spec(4 * GB, "g6e.2xlarge")
    assert {c.loader for c in cold_starts(spec)} == set(LOADERS)


def test_the_decision_rule() -> None:
    """Run:ai for standalone vLLM on GPUs, Mountpoint for Ray and on Inferentia2."""
    by_name = {d.name: recommended_loader(d) for d in REFERENCE.deployments}
    assert by_name["mistral-7b-g6e"].loader == "runai_streamer"
    assert by_name["qwen25-7b-g6e"].loader == "mountpoint"
    assert by_name["llama3-8b-inf2"].loader == "mountpoint"
    for recommendation in by_name.values():
        assert recommendation.reason


def test_lustre_read_follows_capacity_and_throughput() -> None:
    """FSx reads at capacity x throughput per TiB: a larger tier reads faster."""
    slow = _spec(16 * GB, "g6e.xlarge", loader="fsx", fsx={"throughput_per_tib": 125})
    fast = _spec(16 * GB, "g6e.xlarge", loader="fsx", fsx={"throughput_per_tib": 1000})
    tib = 1200 / 1024
    assert cold_start(slow).seconds("weights") == pytest.approx(16 * GB / (tib * 125e6))
    assert cold_start(fast).seconds("weights") < cold_start(slow).seconds("weights")
    assert sizing.weight_bytes(slow.model.architecture) == 16 * GB


def test_the_docs_table_is_the_estimate() -> None:
    """docs/loading-weights.md shows our numbers: each cell is what the estimate gives."""
    page = (REPO / "docs" / "loading-weights.md").read_text()
    table = page.split("<!-- cold-start-table -->")[1].split("<!-- /cold-start-table -->")[0]
    rows = [line.strip("| ").split(" | ") for line in table.strip().splitlines()[2:]]
    loaders = ["runai_streamer", "mountpoint", "fsx", "image"]
    assert rows
    for model, *cells in rows:
        spec = ModelDeploymentSpec.model_validate(
            {
                "name": "docs",
                "model": model,
                "instance_type": "g6e.2xlarge",
                "engine": "vllm",
                "weights": {"prefix": "models/docs/", "loader": "runai_streamer"},
            }
        )
        for loader, cell in zip(loaders, cells, strict=True):
            estimate = cold_start(spec, loader)
            weights = estimate.seconds("weights") + estimate.seconds("weights_image")
            assert cell == f"{weights:.0f} / {estimate.total_seconds:.0f}", (model, loader)
