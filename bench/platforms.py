"""Generated platforms for scale benchmarks and limit tests: many deployments of every kind."""

from __future__ import annotations

from collections import Counter
from itertools import cycle, islice
from typing import Any

from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec

# One row per kind of deployment the library renders: engine x accelerator x weight loader.
_KINDS: tuple[dict[str, Any], ...] = (
    {
        "model": "llama-3-8b",
        "instance_type": "inf2.48xlarge",
        "engine": "rayservice",
        "tensor_parallel_size": 8,
        "scaling": {"min_replicas": 1, "max_replicas": 3},
        "neuron": {"compiled_artifacts_prefix": "neuron-artifacts/"},
    },
    {
        "model": "mistral-7b",
        "instance_type": "g6e.2xlarge",
        "engine": "vllm",
        "weights": {"loader": "runai_streamer"},
    },
    {
        "model": "qwen2.5-7b",
        "instance_type": "g6e.2xlarge",
        "engine": "rayservice",
        "scaling": {"min_replicas": 1, "max_replicas": 2},
    },
    {
        "model": "llama-3-8b",
        "instance_type": "inf2.48xlarge",
        "engine": "vllm",
        "tensor_parallel_size": 8,
        "neuron": {"compiled_artifacts_prefix": "neuron-artifacts/"},
    },
)


def generated_platform(deployments: int) -> PlatformSpec:
    """A platform with ``deployments`` models cycling through every kind, pools sized to fit."""
    specs = []
    for i, kind in enumerate(islice(cycle(_KINDS), deployments)):
        name = f"m{i:03d}-{kind['model'].replace('.', '')}"
        weights = {"prefix": f"models/{name}/", **kind.get("weights", {})}
        specs.append(ModelDeploymentSpec.model_validate({**kind, "name": name, "weights": weights}))
    nodes: Counter[str] = Counter()
    for spec in specs:
        nodes[spec.instance_type] += spec.nodes_during_rollout
    pools = [
        {"name": "system", "instance_types": ["m6i.2xlarge"], "min_size": 2, "max_size": 8},
        {"name": "inf2", "instance_types": ["inf2.48xlarge"], "max_size": nodes["inf2.48xlarge"]},
        {"name": "g6e", "instance_types": ["g6e.2xlarge"], "max_size": nodes["g6e.2xlarge"]},
    ]
    return PlatformSpec.model_validate(
        {
            "cluster_name": "scale",
            "model_bucket_name": "eks-inference-scale-models",
            # The reference app's endpoint: every deployment on one internal load balancer.
            "endpoint": {"scheme": "internal", "routing": "path", "authentication": "api_key"},
            "node_pools": pools,
            "deployments": specs,
        }
    )
