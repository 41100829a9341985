"""Any valid deployment renders valid, correctly placed objects (property-based)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from ray.serve.schema import ServeDeploySchema

from eks_inference import names
from eks_inference.catalog import INSTANCE_TYPES, MODELS, Accelerator
from eks_inference.charts.render import render_platform
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.checks import found
from tests.helpers.objects import is_custom_resource, of_kind, pod_templates, serve_config
from tests.helpers.rendered import CONTEXT

ACCELERATED = sorted(n for n, t in INSTANCE_TYPES.items() if t.accelerator is not Accelerator.NONE)


@st.composite
def platforms(draw: st.DrawFn) -> PlatformSpec:
    instance = INSTANCE_TYPES[draw(st.sampled_from(ACCELERATED))]
    neuron = instance.accelerator is Accelerator.NEURON
    engine = draw(st.sampled_from(["vllm", "rayservice"]))
    low = draw(st.integers(0 if engine == "rayservice" else 1, 3))
    high = low if engine == "vllm" else draw(st.integers(max(low, 1), 6))
    max_model_len = draw(st.sampled_from([1024, 2048, 4096, 8192]))
    deployment: dict[str, Any] = {
        "name": "model",
        "model": draw(st.sampled_from(sorted(MODELS))),
        "instance_type": instance.name,
        "engine": engine,
        "tensor_parallel_size": draw(st.sampled_from(instance.valid_tensor_parallel)),
        "limits": {
            "max_model_len": max_model_len,
            "max_num_seqs": draw(st.sampled_from([1, 4, 16, 32])),
            "block_size": draw(st.sampled_from([16, 32])),
        },
        "scaling": {"min_replicas": low, "max_replicas": high},
        "weights": {
            "prefix": "models/m/",
            "loader": draw(
                st.sampled_from(["mountpoint", "runai_streamer"])
                if engine == "vllm" and not neuron
                else st.just("mountpoint")
            ),
        },
    }
    if neuron:
        compiled = draw(st.booleans())
        deployment["neuron"] = {
            "compiled_artifacts_prefix": "artifacts/" if compiled else None,
            "allow_compile_at_startup": not compiled,
            "allow_poor_compile_architecture": True,
            "sequence_buckets": draw(
                st.lists(st.sampled_from([128, 256, 512, 1024]), max_size=3, unique=True)
            ),
        }
    try:
        return PlatformSpec.model_validate(
            {
                "model_bucket_name": CONTEXT.bucket_name,
                "node_pools": [
                    {"name": "system", "instance_types": ["m7i.2xlarge"]},
                    {"name": "accel", "instance_types": [instance.name], "max_size": 10},
                ],
                "deployments": [deployment],
            }
        )
    except ValidationError:
        assume(False)
        raise


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(platform=platforms())
def test_any_valid_deployment_renders_valid_placed_objects(platform: PlatformSpec) -> None:
    objects = render_platform(platform, CONTEXT)
    (spec,) = platform.deployments
    for obj in found(o for o in objects[spec.name] if not is_custom_resource(o)):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    for service in of_kind(objects[spec.name], "RayService"):
        ServeDeploySchema.model_validate(serve_config(service))
    accelerator = names.NEURONCORE_RESOURCE if spec.on_neuron else names.NVIDIA_GPU_RESOURCE
    for template in pod_templates(platform, objects):
        assert template.spec["nodeSelector"] == template.pool.node_selector()
        for taint in template.pool.taints:
            assert taint.toleration() in template.spec["tolerations"]
        limits = template.server["resources"]["limits"]
        if template.role == "ray-head":
            assert accelerator not in limits
        else:
            assert limits[accelerator] == str(spec.tensor_parallel_size)
