"""Standalone vLLM scales with KEDA: the spec rules that allow it, and the ScaledObject, which
targets the deployment's own Deployment within the spec's bounds and validates against the
KEDA 2.20.2 CRD."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from eks_inference import names
from eks_inference.charts.autoscaling import autoscaling_chart, scale_in_behavior
from eks_inference.observability.signals import signals_of
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.startup_budget import model_load_seconds
from tests.helpers.objects import crd_validator, of_kind, one, schema_errors
from tests.helpers.observed import AUTOSCALED, SCALEDOBJECT_CRD, autoscaled_objects
from tests.helpers.rendered import Rendered

VLLM = {
    "name": "m",
    "model": "mistral-7b",
    "instance_type": "g6e.2xlarge",
    "engine": "vllm",
    "weights": {"prefix": "models/m/", "loader": "runai_streamer"},
}


def _spec(**scaling: Any) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate({**VLLM, "scaling": scaling})


def test_autoscaling_lifts_the_fixed_size_rule() -> None:
    with pytest.raises(ValidationError, match="autoscale: true"):
        _spec(min_replicas=1, max_replicas=3)
    assert _spec(min_replicas=1, max_replicas=3, autoscale=True).scaling.max_replicas == 3


def test_standalone_vllm_does_not_scale_to_zero() -> None:
    with pytest.raises(ValidationError) as error:
        _spec(min_replicas=0, max_replicas=3, autoscale=True)
    (problem,) = error.value.errors()
    assert problem["loc"] == ("scaling", "min_replicas")
    assert "engine: rayservice" in problem["msg"]


def test_autoscaling_needs_a_range() -> None:
    with pytest.raises(ValidationError, match="needs a range"):
        _spec(min_replicas=2, max_replicas=2, autoscale=True)


def test_capacity_counts_max_replicas_plus_surge() -> None:
    pools = [
        {"name": "system", "instance_types": ["m6i.xlarge"], "max_size": 2},
        {"name": "g6e", "instance_types": ["g6e.2xlarge"], "max_size": 4},
    ]
    deployment = {**VLLM, "scaling": {"min_replicas": 1, "max_replicas": 4, "autoscale": True}}
    with pytest.raises(ValidationError, match="max_size >= 5"):
        PlatformSpec.model_validate(
            {"model_bucket_name": "b-bucket", "node_pools": pools, "deployments": [deployment]}
        )


def test_only_autoscaled_standalone_vllm_gets_a_scaled_object(rendered: Rendered) -> None:
    for spec in rendered.platform.deployments:
        assert not of_kind(rendered.objects[spec.name], "ScaledObject"), spec.name
    objects = autoscaled_objects()
    for spec in AUTOSCALED.deployments:
        assert len(of_kind(objects[spec.name], "ScaledObject")) == 1
    ray = rendered.platform.deployments[0]
    with pytest.raises(ValueError, match="only rendered for a deployment that asks for one"):
        autoscaling_chart(ray)


def test_scaled_object_targets_the_deployment_within_the_spec_bounds() -> None:
    validator = crd_validator(SCALEDOBJECT_CRD, "v1alpha1")
    objects = autoscaled_objects()
    for spec in AUTOSCALED.deployments:
        scaled = one(objects[spec.name], "ScaledObject")
        assert not schema_errors(validator, scaled)
        target = scaled["spec"]["scaleTargetRef"]
        deployment = one(objects[spec.name], "Deployment")
        assert (target["apiVersion"], target["kind"], target["name"]) == (
            deployment["apiVersion"],
            "Deployment",
            deployment["metadata"]["name"],
        )
        assert scaled["metadata"]["namespace"] == deployment["metadata"]["namespace"]
        assert scaled["spec"]["minReplicaCount"] == spec.scaling.min_replicas
        assert scaled["spec"]["maxReplicaCount"] == spec.scaling.max_replicas
        # The autoscaler owns the count: applying the manifest again must not reset it.
        assert "replicas" not in deployment["spec"]


def test_triggers_read_queue_depth_and_kv_cache_from_prometheus() -> None:
    objects = autoscaled_objects()
    for spec in AUTOSCALED.deployments:
        signals = signals_of(spec)
        triggers = {
            t["name"]: t for t in one(objects[spec.name], "ScaledObject")["spec"]["triggers"]
        }
        queue, kv = triggers["queue-depth"], triggers["kv-cache"]
        for trigger in (queue, kv):
            assert trigger["type"] == "prometheus"
            assert trigger["metadata"]["serverAddress"] == names.prometheus_url()
        assert "vllm:num_requests_waiting" in queue["metadata"]["query"]
        assert queue["metadata"]["query"] == signals.requests_waiting
        assert queue["metricType"] == "AverageValue"
        assert queue["metadata"]["threshold"] == str(max(1, spec.limits.max_num_seqs // 4))
        assert kv["metadata"]["query"] == signals.kv_cache_usage_avg
        assert "vllm:kv_cache_usage_perc" in kv["metadata"]["query"]
        assert kv["metricType"] == "Value"


def test_scale_in_is_slower_than_a_model_load() -> None:
    objects = autoscaled_objects()
    for spec in AUTOSCALED.deployments:
        config = one(objects[spec.name], "ScaledObject")["spec"]["advanced"]
        down = config["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
        assert down["stabilizationWindowSeconds"] > model_load_seconds(spec)
        assert down["policies"] == [
            {"type": "Pods", "value": 1, "periodSeconds": model_load_seconds(spec)}
        ]


def test_scale_in_stays_within_the_hpa_limits() -> None:
    compiling = ModelDeploymentSpec.model_validate(
        {
            "name": "slow",
            "model": "llama-3.1-70b",
            "instance_type": "inf2.48xlarge",
            "engine": "vllm",
            "tensor_parallel_size": 24,
            "scaling": {"min_replicas": 1, "max_replicas": 2, "autoscale": True},
            "weights": {"prefix": "models/l/"},
            "neuron": {"allow_compile_at_startup": True},
        }
    )
    behavior = scale_in_behavior(signals_of(compiling))
    assert signals_of(compiling).scale_in_window_seconds > 3600
    assert behavior["stabilizationWindowSeconds"] == 3600
    assert behavior["policies"][0]["periodSeconds"] == 1800
