"""``plan`` for deployments that scale to zero: the cold start is the deployment's own estimate,
and what idle saves follows from the catalog's node price, the engine's delay to zero and the
idle hours."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml

from eks_inference.catalog import INSTANCE_TYPES
from eks_inference.catalog.spot_prices import SPOT_PRICES
from eks_inference.charts.context import RenderContext
from eks_inference.charts.serving import ServerInputs, serving_engine
from eks_inference.engines.kserve.options import serverless_of
from eks_inference.ops.errors import BadInput
from eks_inference.ops.plan import plan_platform
from eks_inference.ops.scale_to_zero import (
    DEFAULT_IDLE_HOURS,
    require_idle_hours,
    scales_to_zero,
)
from eks_inference.specification.cold_start import cold_start
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REPO, platform_data

EXAMPLE = REPO / "examples" / "kserve-platform.yaml"
REFERENCE = REPO / "deployments.yaml"
CONTEXT = RenderContext(bucket_name="b", region="us-east-1", neuron_ray_image="")


def _example(**changes: Any) -> PlatformSpec:
    data = platform_data(EXAMPLE)
    deployment = data["deployments"][0]
    for key, value in changes.items():
        if key == "capacity_type":
            data["node_pools"][1]["capacity_type"] = value
        elif key == "options":
            deployment["options"] = value
        else:
            deployment["scaling"][key] = value
    return PlatformSpec.model_validate(data)


def _ray_at_zero() -> PlatformSpec:
    """Ray Serve LLM scaling to zero on a g6e.2xlarge (the chart variants' deployment)."""
    data = platform_data(EXAMPLE)
    data["deployments"] = [
        {
            "name": "mistral-gpu-zero",
            "model": "mistral-7b",
            "instance_type": "g6e.2xlarge",
            "engine": "rayservice",
            "scaling": {"min_replicas": 0, "max_replicas": 2, "target_ongoing_requests": 8},
            "weights": {"prefix": "models/mistral-7b/"},
        }
    ]
    return PlatformSpec.model_validate(data)


def test_the_example_prints_its_own_cold_start_and_the_catalog_saving() -> None:
    platform = PlatformSpec.from_yaml(EXAMPLE)
    (deployment,) = plan_platform(platform).deployments
    spec = platform.deployment(deployment.name)
    zero = deployment.scale_to_zero
    assert zero is not None
    # The one cold-start estimate, with the deployment's own loader.
    estimate = cold_start(spec)
    assert deployment.cold_start == estimate
    assert zero.cold_start_seconds == estimate.total_seconds
    assert zero.loader == spec.weights.loader == "runai_streamer"
    # An idle hour saves the node one warm replica holds, at the catalog's on-demand price.
    price = INSTANCE_TYPES[spec.instance_type].price_per_hour
    assert zero.nodes_per_replica == math.ceil(1 / spec.replicas_per_node)
    assert zero.saved_per_idle_hour == pytest.approx(zero.nodes_per_replica * price)
    # Knative keeps the last replica for the retention period the spec sets.
    retention = serverless_of(spec).retention_seconds
    assert zero.delay_seconds == retention
    hours = DEFAULT_IDLE_HOURS - retention / 3600
    assert zero.hours_at_zero_per_day == pytest.approx(hours)
    assert zero.saved_per_day == pytest.approx(zero.nodes_per_replica * price * hours)
    json = deployment.as_json()["scale_to_zero"]
    assert json["saved_per_day"] == round(zero.nodes_per_replica * price * hours, 2)
    assert json["cold_start_seconds"] == round(estimate.total_seconds, 1)


@pytest.mark.parametrize("idle", [0.0, 0.25, 6.0, 24.0])
def test_the_idle_hours_less_the_retention_are_saved(idle: float) -> None:
    platform = _example(options={"retention_seconds": 900})
    (deployment,) = plan_platform(platform, idle_hours=idle).deployments
    zero = deployment.scale_to_zero
    assert zero is not None
    expected_hours = max(idle - 900 / 3600, 0.0)
    assert zero.hours_at_zero_per_day == pytest.approx(expected_hours)
    price = INSTANCE_TYPES["g6e.2xlarge"].price_per_hour
    assert zero.saved_per_day == pytest.approx(price * expected_hours)


def test_a_spot_pool_saves_at_the_catalogs_spot_price() -> None:
    (deployment,) = plan_platform(_example(capacity_type="SPOT")).deployments
    assert deployment.scale_to_zero is not None
    assert deployment.scale_to_zero.saved_per_idle_hour == pytest.approx(SPOT_PRICES["g6e.2xlarge"])


def test_ray_serve_reaches_zero_after_its_downscale_delay_and_the_worker_idle_timeout() -> None:
    platform = _ray_at_zero()
    spec = platform.deployments[0]
    (deployment,) = plan_platform(platform).deployments
    assert deployment.scale_to_zero is not None
    # The two delays as the RayService renders them.
    content = serving_engine(spec).server(
        ServerInputs(spec, platform.placement(spec), CONTEXT, _Claim(), None, None)
    )
    (service,) = (o for o in content.objects if o["kind"] == "RayService")
    cluster = service["spec"]["rayClusterConfig"]
    idle_timeout = cluster["autoscalerOptions"]["idleTimeoutSeconds"]
    (app,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    delays = {
        d["autoscaling_config"]["downscale_delay_s"]
        for d in _deployments(app)
        if "autoscaling_config" in d
    }
    (downscale,) = delays
    assert deployment.scale_to_zero.delay_seconds == downscale + idle_timeout


def test_deployments_that_keep_a_replica_have_no_idle_figures() -> None:
    assert plan_platform(_example(min_replicas=1)).deployments[0].scale_to_zero is None
    reference = PlatformSpec.from_yaml(REFERENCE)
    assert not any(scales_to_zero(spec) for spec in reference.deployments)
    for deployment in plan_platform(reference).deployments:
        assert deployment.scale_to_zero is None
        assert deployment.as_json()["scale_to_zero"] is None


@pytest.mark.parametrize("hours", [-1.0, 24.5, math.nan, math.inf])
def test_idle_hours_outside_a_day_are_refused(hours: float) -> None:
    with pytest.raises(BadInput, match="--idle-hours"):
        require_idle_hours(hours)


class _Claim:
    """The Mountpoint claim the Ray pods mount; its name is all the engine reads."""

    claim_name = "mistral-gpu-zero-weights"


def _deployments(app: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Serve deployment's options in a Serve application's config, however nested."""
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "autoscaling_config" in value:
                found.append(value)
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(app)
    return found
