"""Any input either fails validation with a ValidationError, or renders schema-valid manifests.

The strategy draws a plausible deployment and then breaks up to three of its fields with
adversarial values: unknown names, zero and negative numbers, wrong prefixes, GPU-only loaders
on Neuron, arbitrary architectures. Whatever it draws, the library must raise nothing but
:class:`pydantic.ValidationError`, and what validates must render objects that Kubernetes, the
KubeRay CRD and Ray Serve accept.
"""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from ray.serve.schema import ServeDeploySchema

from eks_inference.catalog import INSTANCE_TYPES, MODELS, Accelerator, sizing
from eks_inference.charts.render import render_platform
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.numa import numa_span
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.checks import found
from tests.helpers.objects import (
    is_custom_resource,
    of_kind,
    rayservice_schema_errors,
    serve_config,
)
from tests.helpers.rendered import CONTEXT

ACCELERATED = sorted(n for n, t in INSTANCE_TYPES.items() if t.accelerator is not Accelerator.NONE)


@st.composite
def plausible_specs(draw: st.DrawFn) -> dict[str, Any]:
    instance = INSTANCE_TYPES[draw(st.sampled_from(ACCELERATED))]
    engine = draw(st.sampled_from(["vllm", "rayservice"]))
    low = draw(st.integers(0 if engine == "rayservice" else 1, 3))
    spec: dict[str, Any] = {
        "name": draw(st.sampled_from(["model", "llama-3"])),
        "model": draw(st.sampled_from(sorted(MODELS))),
        "instance_type": instance.name,
        "engine": engine,
        "tensor_parallel_size": draw(st.sampled_from(instance.valid_tensor_parallel)),
        "limits": {
            "max_model_len": draw(st.sampled_from([1024, 2048, 4096, 8192])),
            "max_num_seqs": draw(st.sampled_from([1, 4, 16, 32])),
            "block_size": draw(st.sampled_from([16, 32, 128])),
        },
        "scaling": {
            "min_replicas": low,
            "max_replicas": low if engine == "vllm" else draw(st.integers(max(low, 1), 6)),
        },
        "weights": {"prefix": "models/m/", "loader": "mountpoint"},
    }
    if instance.accelerator is Accelerator.NEURON:
        spec["neuron"] = {
            "compiled_artifacts_prefix": "neuron/",
            "allow_poor_compile_architecture": True,
            "sequence_buckets": draw(st.lists(st.sampled_from([128, 512, 1024]), max_size=3)),
            "run_compile_job": draw(st.booleans()),
        }
    elif engine == "vllm":
        spec["weights"]["loader"] = draw(st.sampled_from(["mountpoint", "runai_streamer"]))
    return spec


architectures = st.fixed_dictionaries(
    {
        "family": st.sampled_from(["llama", "gemma2", ""]),
        "num_layers": st.integers(-1, 96),
        "hidden_size": st.sampled_from([0, 1000, 4096, 8192]),
        "num_attention_heads": st.integers(-1, 64),
        "num_kv_heads": st.integers(-1, 16),
        "vocab_size": st.sampled_from([0, 32000]),
        "num_parameters": st.sampled_from([-1, 10**9, 8 * 10**9, 400 * 10**9]),
        "max_position_embeddings": st.sampled_from([0, 2048, 131072]),
    },
    optional={"head_dim": st.sampled_from([None, 0, 128]), "dtype": st.sampled_from(["int3"])},
)

# (field path, adversarial value): each breaks, or stresses, one rule.
MUTATIONS: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    (("name",), st.sampled_from(["Bad_Name", "", "x" * 41, "-x"])),
    (
        ("model",),
        st.one_of(
            st.sampled_from(["llama-9-1t", "gemma-2-9b", "llama-3.1-70b"]),
            st.fixed_dictionaries({"id": st.just("org/m"), "architecture": architectures}),
        ),
    ),
    (("instance_type",), st.sampled_from(["x9.huge", "m6i.xlarge", *ACCELERATED])),
    (("engine",), st.sampled_from(["triton", "vllm", "rayservice"])),
    (("tensor_parallel_size",), st.integers(-1, 32)),
    (("limits", "max_model_len"), st.sampled_from([-1, 0, 100, 131072])),
    (("limits", "max_num_seqs"), st.sampled_from([0, 256, 1024])),
    (("limits", "block_size"), st.sampled_from([0, 7, 512])),
    (("limits", "gpu_memory_utilization"), st.floats(-0.5, 1.5)),
    (("scaling", "min_replicas"), st.integers(-1, 8)),
    (("scaling", "max_replicas"), st.integers(-1, 8)),
    (("scaling", "target_ongoing_requests"), st.sampled_from([None, 0, 1, 500])),
    (("weights", "prefix"), st.sampled_from(["models/m", "s3://b/m/", "/m/", ""])),
    (("weights", "loader"), st.sampled_from(["runai_streamer", "nfs", "mountpoint"])),
    (("neuron",), st.sampled_from([None, {}, {"allow_compile_at_startup": True}])),
    (("neuron", "compiled_artifacts_prefix"), st.sampled_from([None, "neuron", "s3://b/n/"])),
    (("neuron", "sequence_buckets"), st.lists(st.sampled_from([0, 100, 65536]), max_size=2)),
    (("neuron", "overrides"), st.sampled_from([{}, {"sequence_parallel_enabled": True}])),
]


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    spec = copy.deepcopy(draw(plausible_specs()))
    for path, values in draw(st.lists(st.sampled_from(MUTATIONS), max_size=3)):
        target = spec
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        target[path[-1]] = draw(values)
    return spec


def platform_for(spec: ModelDeploymentSpec) -> PlatformSpec:
    """A platform whose pools offer the spec's instance type and hold it, rollouts included.

    Root volumes hold the images and, on Neuron, the compile job's disk (a 70B model needs
    more than the 200 GiB default).
    """
    disk = sizing.compile_disk_gib(spec.model.architecture) + sizing.NODE_IMAGE_AND_SYSTEM_GIB
    accelerators: dict[str, Any] = {
        "name": "accelerators",
        "instance_types": [spec.instance_type],
        "max_size": max(spec.nodes_during_rollout, 1),
        "disk_size_gib": max(disk, 200),
    }
    # A replica across NUMA nodes (tensor parallel 8 on g6e.48xlarge) needs a pool that lets
    # it span them.
    if numa_span(spec.instance, spec.tensor_parallel_size) is not None:
        accelerators["topology_manager_policy"] = "restricted"
    return PlatformSpec.model_validate(
        {
            "model_bucket_name": CONTEXT.bucket_name,
            "node_pools": [
                {"name": "system", "instance_types": ["m6i.2xlarge"]},
                accelerators,
            ],
            "deployments": [spec],
        }
    )


def assert_schema_valid(objects: list[dict[str, Any]]) -> None:
    for obj in found(o for o in objects if not is_custom_resource(o)):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    for service in of_kind(objects, "RayService"):
        ServeDeploySchema.model_validate(serve_config(service))
        assert not rayservice_schema_errors(service)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=specs())
def test_any_input_validates_and_renders_or_raises_validation_error(raw: dict[str, Any]) -> None:
    try:
        spec = ModelDeploymentSpec.model_validate(raw)
    except ValidationError:
        event("rejected by validation")
        return
    event(f"rendered: {spec.engine} on {spec.accelerator}")
    objects = render_platform(platform_for(spec), CONTEXT)[spec.name]
    assert objects
    assert_schema_valid(objects)
