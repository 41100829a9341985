"""``adapters`` on a deployment: the type's own rules, the capability rule, and the sizing
rules, each a problem under its field path that says what would work."""

from __future__ import annotations

from typing import Any

import pytest

from eks_inference.charts.adapters import RUNTIME_ADAPTER_PATHS
from eks_inference.specification.adapters import VLLM_LORA_RANKS
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.routes import blocked_paths, served_model_names
from tests.helpers.errors import errors_of
from tests.helpers.platforms import UPSTREAM
from tests.helpers.vllm_args import serve_options

ADAPTERS: dict[str, Any] = {
    "prefix": "adapters/llama-3-8b/",
    "max_loras": 4,
    "preload": ["support-tone"],
    "on_demand": ["sql-writer"],
}


def deployment(**changes: Any) -> dict[str, Any]:
    return {
        "name": "llama-lora",
        "model": "llama-3-8b",
        "instance_type": "g6e.2xlarge",
        "engine": "vllm",
        "weights": {"prefix": "models/llama-3-8b/"},
        "adapters": ADAPTERS,
        **changes,
    }


def adapters(**changes: Any) -> dict[str, Any]:
    return deployment(adapters={**ADAPTERS, **changes})


def test_the_ranks_are_the_choices_of_the_pinned_vllm() -> None:
    """``max_lora_rank``'s values are those of the recorded ``vllm serve`` table."""
    option = serve_options()["--max-lora-rank"]
    assert option.kind == "choices"
    assert option.detail == str(list(map(str, VLLM_LORA_RANKS))).replace("'", '"')
    assert (UPSTREAM / "vllm-v0.34.0-serve-options.txt").exists()


def test_a_valid_deployment_serves_its_adapters_by_name() -> None:
    spec = ModelDeploymentSpec.model_validate(deployment())
    assert served_model_names(spec) == (spec.model.id, "support-tone", "sql-writer")
    assert blocked_paths(spec) == RUNTIME_ADAPTER_PATHS
    assert spec.adapters is not None
    assert spec.adapters.cpu_loras == 4
    preloaded_only = ModelDeploymentSpec.model_validate(adapters(on_demand=[]))
    assert blocked_paths(preloaded_only) == ()


@pytest.mark.parametrize(
    ("data", "field", "expected"),
    [
        (
            adapters(max_lora_rank=24),
            "adapters.max_lora_rank",
            "max_lora_rank 24 is not a rank vLLM accepts; use one of [1, 8, 16, 32, 64, 128, "
            "256, 320, 512]",
        ),
        (
            adapters(max_cpu_loras=2),
            "adapters.max_cpu_loras",
            "max_cpu_loras (2) is below max_loras (4); vLLM refuses it",
        ),
        (
            adapters(on_demand=["support-tone"]),
            "adapters.on_demand",
            "adapter 'support-tone' is listed twice",
        ),
        (adapters(preload=[], on_demand=[]), "adapters.preload", "no adapter is served"),
        (adapters(preload=["../etc"]), "adapters.preload.0", "String should match pattern"),
        (
            deployment(engine="rayservice"),
            "adapters",
            "engine rayservice (Ray Serve on a KubeRay RayService) does not serve LoRA adapters; "
            "remove adapters (serve each fine-tune as a deployment of its own), or use engine: "
            "vllm or kserve",
        ),
        (
            # 10 slots of rank 512 (2.75 GiB each) leave no room for one 4096-token sequence.
            adapters(max_loras=10, max_lora_rank=512),
            "adapters.max_loras",
            "10 adapter slots of rank 512 take 27.52 GiB of the 25.28 GiB left beside the "
            "weights on 1 GPU of g6e.2xlarge, leaving no KV cache for one sequence of 4096 "
            "tokens; use max_loras <= 9",
        ),
        (
            # Host memory: a whole adapter of rank 512 is 2.75 GiB; a g6e.2xlarge replica has
            # (64 x 0.9 - 2) GiB = 55.5 GiB, of which the server needs 16: 14 adapters fit.
            adapters(max_lora_rank=512, max_loras=2, max_cpu_loras=256),
            "adapters.max_cpu_loras",
            "up to 704.6 GiB; a replica of g6e.2xlarge has 55.5 GiB, of which the server needs "
            "16 GiB; use max_cpu_loras <= 14",
        ),
    ],
)
def test_bad_adapters_are_refused_under_their_field(
    data: dict[str, Any], field: str, expected: str
) -> None:
    errors = errors_of(data, ModelDeploymentSpec)
    assert field in errors, errors
    assert expected in errors[field], errors[field]


def test_on_demand_adapters_need_a_model_path_in_the_pod() -> None:
    """vLLM's resolver compares an on-demand adapter's base model with the server's model as
    vLLM holds it; with the Run:ai streamer that is a download directory of vLLM's naming."""
    streamed = {"prefix": "models/llama-3-8b/", "loader": "runai_streamer"}
    errors = errors_of(deployment(weights=streamed), ModelDeploymentSpec)
    assert "weights.loader runai_streamer gives it an S3 URI" in errors["adapters.on_demand"]
    assert (
        "use loader: mountpoint, or list these adapters under preload"
        in (errors["adapters.on_demand"])
    )
    ModelDeploymentSpec.model_validate(adapters(on_demand=[]) | {"weights": streamed})


def test_adapters_on_inferentia_are_refused_naming_the_instance() -> None:
    data = deployment(
        instance_type="inf2.48xlarge",
        tensor_parallel_size=8,
        neuron={"compiled_artifacts_prefix": "neuron-artifacts/"},
    )
    errors = errors_of(data, ModelDeploymentSpec)
    assert "does not serve LoRA adapters on inf2.48xlarge" in errors["adapters"]


def test_slots_that_shrink_the_batch_name_it_in_the_fit() -> None:
    """Slots that leave room for some sequences, not for ``max_num_seqs``, are the fit's
    problem: the message counts the slots and the batch that fits."""
    data = adapters(max_loras=4, max_lora_rank=512)
    data["limits"] = {"max_num_seqs": 64}
    errors = errors_of(data, ModelDeploymentSpec)
    message = errors["tensor_parallel_size"]
    assert "+ 11.01 GiB of adapter slots" in message
    assert "max_num_seqs <= 28" in message
