"""Platforms rendered once per session, without aws-cdk, and the fixtures that give them.

The reference platform (deployments.yaml) is what `k8s_manifests/` holds; the variants
platform adds deployments the reference does not exercise (standalone vLLM on Inferentia2,
whole-node Neuron pods, compiling at startup, GPU tensor parallelism, LoRA adapters, scale to
zero), so that
every branch of every chart is rendered and checked by the same assertions. The fixtures are
those of the folders whose tests read rendered platforms (charts, engines and the manifest
writer's output), each of whose conftest modules takes them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from eks_inference.charts.context import RenderContext
from eks_inference.charts.render import render_files, render_platform
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM

CONTEXT = RenderContext(
    bucket_name="eks-inference-models-example",
    region="us-east-1",
    neuron_ray_image="111122223333.dkr.ecr.us-east-1.amazonaws.com/eks-inference-neuron-ray:3f1c9a",
)

VARIANT_POOLS: list[dict[str, Any]] = [
    {"name": "system", "instance_types": ["m6i.xlarge"], "min_size": 1, "max_size": 3},
    {"name": "inf2-48", "instance_types": ["inf2.48xlarge"], "max_size": 4},
    {"name": "inf2-8", "instance_types": ["inf2.8xlarge"], "max_size": 4},
    {"name": "g6e", "instance_types": ["g6e.2xlarge"], "max_size": 4},
    {"name": "g6e-12", "instance_types": ["g6e.12xlarge"], "max_size": 4},
    # Room on the root volume for the LMCache disk tier's ephemeral storage.
    {"name": "g6e-4", "instance_types": ["g6e.4xlarge"], "max_size": 2, "disk_size_gib": 800},
]
VARIANT_DEPLOYMENTS: list[dict[str, Any]] = [
    # Standalone vLLM on a part of an inf2.48xlarge: Neuron scheduler, artifacts, overrides.
    {
        "name": "llama-neuron-vllm",
        "model": "llama-3-8b",
        "instance_type": "inf2.48xlarge",
        "engine": "vllm",
        "tensor_parallel_size": 8,
        "scaling": {"min_replicas": 2, "max_replicas": 2},
        "weights": {"prefix": "models/llama-3-8b/"},
        "neuron": {
            "compiled_artifacts_prefix": "neuron-artifacts/",
            "sequence_buckets": [1024, 128, 4096],
            "overrides": {"fused_qkv": True},
        },
    },
    # Standalone vLLM on all cores of an inf2.8xlarge: no Neuron scheduler needed.
    {
        "name": "llama-neuron-whole",
        "model": "llama-3-8b",
        "instance_type": "inf2.8xlarge",
        "engine": "vllm",
        "tensor_parallel_size": 2,
        "limits": {"max_model_len": 4096, "max_num_seqs": 4},
        "weights": {"prefix": "models/llama-3-8b/"},
        "neuron": {"compiled_artifacts_prefix": "neuron-artifacts/"},
    },
    # Ray Serve on Inferentia2 compiling at startup (development): no artifacts volume.
    {
        "name": "mistral-neuron-dev",
        "model": "mistral-7b",
        "instance_type": "inf2.48xlarge",
        "engine": "rayservice",
        "tensor_parallel_size": 4,
        "scaling": {"min_replicas": 1, "max_replicas": 2},
        "weights": {"prefix": "models/mistral-7b/"},
        "neuron": {"allow_compile_at_startup": True},
    },
    # Standalone vLLM on GPUs with a Mountpoint volume and tensor parallelism over 4 GPUs.
    {
        "name": "qwen-gpu-tp4",
        "model": "qwen2.5-7b",
        "instance_type": "g6e.12xlarge",
        "engine": "vllm",
        "tensor_parallel_size": 4,
        "limits": {"max_model_len": 32768, "max_num_seqs": 64, "block_size": 32},
        "weights": {"prefix": "models/qwen2.5-7b/"},
    },
    # Standalone vLLM with LMCache: KV tiers in host memory and on local NVMe.
    {
        "name": "mistral-lmcache",
        "model": "mistral-7b",
        "instance_type": "g6e.4xlarge",
        "engine": "vllm",
        "weights": {"prefix": "models/mistral-7b/", "loader": "runai_streamer"},
        "kv_cache": {"offload": "cpu+disk", "cpu_gib": 64, "disk_gib": 400},
    },
    # Standalone vLLM serving LoRA adapters: one registered at start, two found on demand.
    {
        "name": "llama-gpu-lora",
        "model": "llama-3-8b",
        "instance_type": "g6e.12xlarge",
        "engine": "vllm",
        "weights": {"prefix": "models/llama-3-8b/"},
        "adapters": {
            "prefix": "adapters/llama-3-8b/",
            "max_loras": 4,
            "max_lora_rank": 32,
            "preload": ["support-tone"],
            "on_demand": ["sql-writer", "legal-summary"],
        },
    },
    # Ray Serve LLM scaling to zero.
    {
        "name": "mistral-gpu-zero",
        "model": "mistral-7b",
        "instance_type": "g6e.2xlarge",
        "engine": "rayservice",
        "scaling": {"min_replicas": 0, "max_replicas": 3, "target_ongoing_requests": 8},
        "weights": {"prefix": "models/mistral-7b/"},
    },
]


@dataclass(frozen=True)
class Rendered:
    """A platform and its rendering: objects per deployment, and the manifest files."""

    platform: PlatformSpec
    objects: dict[str, list[dict[str, Any]]]
    files: dict[str, str]

    def all_objects(self) -> list[dict[str, Any]]:
        return [o for objects in self.objects.values() for o in objects]


def _render(platform: PlatformSpec) -> Rendered:
    return Rendered(
        platform=platform,
        objects=render_platform(platform, CONTEXT),
        files=render_files(platform, CONTEXT),
    )


def variants_spec() -> PlatformSpec:
    """The variants platform: :data:`VARIANT_DEPLOYMENTS` on :data:`VARIANT_POOLS`."""
    return PlatformSpec.model_validate(
        {
            "model_bucket_name": CONTEXT.bucket_name,
            "node_pools": VARIANT_POOLS,
            "deployments": VARIANT_DEPLOYMENTS,
        }
    )


# Each platform is read and rendered once per test process, however many folders' fixtures
# ask for it; tests read the renderings and never change them.
@cache
def _reference_platform() -> PlatformSpec:
    return PlatformSpec.from_yaml(REFERENCE_PLATFORM)


@cache
def _variants_platform() -> PlatformSpec:
    return variants_spec()


@cache
def _rendered(name: str) -> Rendered:
    platforms = {"reference": _reference_platform, "variants": _variants_platform}
    return _render(platforms[name]())


@pytest.fixture(scope="session")
def reference_platform() -> PlatformSpec:
    return _reference_platform()


@pytest.fixture(scope="session")
def variants_platform() -> PlatformSpec:
    return _variants_platform()


@pytest.fixture(scope="session")
def reference() -> Rendered:
    """The reference platform rendered once per session."""
    return _rendered("reference")


@pytest.fixture(scope="session")
def variants() -> Rendered:
    return _rendered("variants")


@pytest.fixture(scope="session", params=["reference", "variants"])
def rendered(request: pytest.FixtureRequest) -> Rendered:
    """Each rendered platform in turn, for assertions that hold for every deployment."""
    return _rendered(request.param)
