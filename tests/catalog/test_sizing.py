"""Sizing maths against the reference numbers (REFERENCE.md's model table)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from eks_inference.catalog import INSTANCE_TYPES, MODELS, ModelArchitecture, sizing


@pytest.mark.parametrize(
    ("model", "kv_bytes_per_token", "weights_gb"),
    [
        ("llama-3-8b", 131_072, 16.1),
        ("llama-3.1-70b", 327_680, 141.1),
        ("mistral-7b", 131_072, 14.5),
        ("qwen2.5-7b", 57_344, 15.2),
        ("gemma-2-9b", 344_064, 18.5),
    ],
)
def test_model_table(model: str, kv_bytes_per_token: int, weights_gb: float) -> None:
    arch = MODELS[model].architecture
    assert sizing.kv_cache_bytes_per_token(arch) == kv_bytes_per_token
    assert sizing.weight_bytes(arch) / 1e9 == pytest.approx(weights_gb, abs=0.05)


def test_memory_fit_uses_the_tensor_parallel_group() -> None:
    arch = MODELS["llama-3-8b"].architecture
    inf2 = INSTANCE_TYPES["inf2.48xlarge"]
    one_core = sizing.memory_fit(arch, inf2, 1, 4096, 32)
    eight = sizing.memory_fit(arch, inf2, 8, 4096, 32)
    assert not one_core.fits
    assert eight.fits
    assert eight.group_memory_bytes == 8 * 16 * 1024**3
    assert eight.kv_cache_bytes == 131_072 * 4096 * 32


def test_max_num_seqs_that_fit_is_the_boundary() -> None:
    arch = MODELS["llama-3-8b"].architecture
    inf2 = INSTANCE_TYPES["inf2.48xlarge"]
    seqs = sizing.max_num_seqs_that_fit(arch, inf2, 2, 4096)
    assert sizing.memory_fit(arch, inf2, 2, 4096, seqs).fits
    assert not sizing.memory_fit(arch, inf2, 2, 4096, seqs + 1).fits


def test_replicas_and_nodes() -> None:
    inf2 = INSTANCE_TYPES["inf2.48xlarge"]
    assert sizing.replicas_per_node(inf2, 8) == 3
    assert sizing.nodes_needed(7, 3) == 3
    assert sizing.nodes_needed(0, 3) == 0


def test_decode_bound_grows_with_batch_and_is_physical() -> None:
    arch = MODELS["llama-3-8b"].architecture
    inf2 = INSTANCE_TYPES["inf2.48xlarge"]
    single = sizing.decode_tokens_per_second_bound(arch, inf2, 8, 4096, 1)
    batched = sizing.decode_tokens_per_second_bound(arch, inf2, 8, 4096, 32)
    # One sequence: each step streams all weights through 4 chips' bandwidth, 3 replicas.
    expected_single = 3 * (4 * 820 * 1024**3) / (16_060_522_496 + 131_072 * 4096)
    assert single == pytest.approx(expected_single)
    assert batched > single
    assert batched >= 3120


def test_cost_per_million_tokens_formula() -> None:
    assert sizing.cost_per_million_tokens(12.98, 3120) == pytest.approx(1.1556, rel=1e-3)


def test_pod_resources_leave_a_system_reserve() -> None:
    node = INSTANCE_TYPES["inf2.48xlarge"]
    pod = sizing.pod_resources(node, 3)
    assert 3 * pod.cpu_millis < node.vcpus * 1000
    assert 3 * pod.memory_mib < node.memory_gib * 1024
    assert pod.cpu == str(pod.cpu_millis // 1000)  # whole CPUs, pinned by the static CPU manager
    assert pod.memory.endswith("Mi")


def test_frontier_models_weigh_what_their_checkpoints_hold() -> None:
    """405B at BF16 is 2 bytes a parameter; its FP8 checkpoint stores the feed-forward weights
    of 124 of its 126 layers in one byte; Qwen3-Coder-480B holds every expert."""
    bf16 = MODELS["llama-3.1-405b"].architecture
    fp8 = MODELS["llama-3.1-405b-fp8"].architecture
    assert sizing.weight_bytes(bf16) == 2 * 405_853_388_800
    assert sizing.weight_bytes(fp8) == 2 * 405_853_388_800 - 124 * 3 * 16384 * 53248
    assert sizing.kv_cache_bytes_per_token(fp8) == sizing.kv_cache_bytes_per_token(bf16)
    qwen = MODELS["qwen3-coder-480b"].architecture
    assert sizing.weight_bytes(qwen) == 2 * 480_154_875_392
    assert sizing.kv_cache_bytes_per_token(qwen) == 2 * 62 * 8 * 128 * 2


def test_fp8_parameters_cannot_exceed_the_parameters() -> None:
    fields = MODELS["llama-3-8b"].architecture.model_dump()
    with pytest.raises(ValidationError, match="fp8_parameters"):
        ModelArchitecture.model_validate({**fields, "fp8_parameters": fields["num_parameters"] + 1})
