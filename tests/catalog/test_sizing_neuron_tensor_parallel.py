"""Tensor parallelism on Inferentia2 pads attention heads instead of requiring TP to divide them.

Issue 13, item 12. NxD Inference (the Neuron vLLM plugin's backend) pads query heads with
zeros to a multiple of TP and replicates KV heads, and the plugin skips vLLM's head check; so
Llama-3.1-70B (64 query heads) runs at TP 24 on an inf2.48xlarge, the only degree whose memory
holds it. The padding and the replicated KV cache are charged in the memory fit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from eks_inference.catalog import GIB, INSTANCE_TYPES, MODELS, ModelArchitecture, sizing
from eks_inference.cli.main import app
from eks_inference.ops import plan
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.errors import errors_of

INF2 = INSTANCE_TYPES["inf2.48xlarge"]
LLAMA_70B = MODELS["llama-3.1-70b"].architecture

PLATFORM_WITH_70B = """
model_bucket_name: eks-inference-models-example
node_pools:
  - {name: system, instance_types: [m6i.2xlarge], min_size: 2, max_size: 4}
  - {name: inf2, instance_types: [inf2.48xlarge], max_size: 3, disk_size_gib: 300}
deployments:
  - name: llama70b-inf2
    model: llama-3.1-70b
    instance_type: inf2.48xlarge
    engine: rayservice
    tensor_parallel_size: 24
    limits: {max_model_len: 4096, max_num_seqs: 32}
    scaling: {min_replicas: 1, max_replicas: 2}
    weights: {prefix: models/llama-3.1-70b/}
    neuron: {compiled_artifacts_prefix: neuron-artifacts/}
"""


def _architecture(heads: int, kv_heads: int) -> ModelArchitecture:
    return ModelArchitecture(
        family="llama",
        num_layers=2,
        hidden_size=heads * 64,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        vocab_size=1000,
        num_parameters=10**8,
        max_position_embeddings=4096,
    )


@pytest.mark.parametrize(
    ("heads", "kv_heads", "tp", "expected"),
    [
        # The examples of NxDI's GQA enum (modules/attention/gqa.py), TP 32: 56 query heads
        # padded to 64; 8 KV heads replicated to one per rank (REPLICATE_TO_TP_DEGREE).
        (56, 8, 32, (64, 32)),
        # KV heads TP neither divides nor is a multiple of: one per query head (CONVERT_TO_MHA).
        (48, 12, 8, (48, 48)),
        # Multi-head attention: KV heads follow the padded query heads.
        (32, 32, 24, (48, 48)),
        # TP divides both: nothing changes.
        (64, 8, 8, (64, 8)),
    ],
)
def test_heads_are_laid_out_as_nxd_inference_does(
    heads: int, kv_heads: int, tp: int, expected: tuple[int, int]
) -> None:
    layout = sizing.sharded_heads(_architecture(heads, kv_heads), INF2, tp)
    assert (layout.attention_heads, layout.kv_heads) == expected


def test_llama_70b_deploys_on_an_inf2_48xlarge_at_tp_24(tmp_path: Path) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(PLATFORM_WITH_70B)
    deployment = PlatformSpec.from_yaml(path).deployments[0]
    assert deployment.tensor_parallel_size == 24
    assert deployment.replicas_per_node == 1
    fit = deployment.memory_fit
    assert fit.fits
    # 64 query heads padded to 72 (+8), 8 KV heads replicated to 24 (+16); each extra head adds
    # head_dim x hidden to two projections, in 80 layers, at 2 bytes.
    assert fit.padding_bytes == 2 * (8 + 16) * 80 * 128 * 8192 * 2
    assert fit.padding_bytes / GIB == pytest.approx(7.5)
    # Every rank caches one KV head: 24 of them instead of 8, three times the model's cache.
    assert fit.kv_cache_bytes == 3 * sizing.kv_cache_bytes(LLAMA_70B, 4096, 32)


def _neuron_70b(**overrides: Any) -> dict[str, Any]:
    raw = yaml.safe_load(PLATFORM_WITH_70B)["deployments"][0]
    raw.update(overrides)
    return raw


def test_tp_8_does_not_hold_llama_70b_and_the_error_names_tp_24() -> None:
    message = errors_of(_neuron_70b(tensor_parallel_size=8), ModelDeploymentSpec)[
        "tensor_parallel_size"
    ]
    assert "use tensor_parallel_size 24" in message


def test_the_padding_and_replicated_kv_cache_decide_the_fit() -> None:
    # Without replication 32 x 4096 tokens of KV cache would be 40 GiB and a batch of 56 would
    # fit; with 24 KV heads a sequence caches 3.75 GiB and only 55 fit beside the weights.
    assert sizing.max_num_seqs_that_fit(LLAMA_70B, INF2, 24, 4096) == 55
    ModelDeploymentSpec.model_validate(_neuron_70b(limits={"max_num_seqs": 55}))
    message = errors_of(_neuron_70b(limits={"max_num_seqs": 56}), ModelDeploymentSpec)[
        "tensor_parallel_size"
    ]
    assert "7.5 GiB of padded and replicated heads" in message
    assert "max_num_seqs <= 55" in message


def test_every_topology_degree_is_usable_on_neuron_and_gpus_keep_vllm_rule() -> None:
    for entry in MODELS.values():
        assert sizing.usable_tensor_parallel(entry.architecture, INF2) == (1, 2, 4, 8, 24)
    qwen = MODELS["qwen2.5-7b"].architecture
    assert sizing.usable_tensor_parallel(qwen, INSTANCE_TYPES["g6e.48xlarge"]) == (1, 2, 4)


def test_plan_sizes_llama_70b_at_tp_24_with_its_padding() -> None:
    result = CliRunner().invoke(
        app,
        [
            "plan",
            "--model",
            "llama-3.1-70b",
            "--instance-type",
            "inf2.48xlarge",
            "--tensor-parallel",
            "24",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["fits"] is True
    assert data["padding_gib"] == pytest.approx(7.5)
    assert data["kv_cache_gib"] == pytest.approx(120.0)
    assert data["required_gib"] == pytest.approx(
        data["weights_gib"] + data["padding_gib"] + data["kv_cache_gib"]
    )


def test_planner_candidates_include_llama_70b_on_inf2() -> None:
    found = {p.instance_type: p for p in plan.candidates("llama-3.1-70b", LLAMA_70B)}
    assert found["inf2.48xlarge"].tensor_parallel_size == 24
