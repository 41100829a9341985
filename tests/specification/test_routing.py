"""``routing``: typed and defaulted, refused where it cannot work with the field path and the
fix, in-process and through the console script (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from eks_inference.ops.plan import plan_platform
from eks_inference.specification.capabilities import PicksEndpoints
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import registered_engines
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.routing import DEFAULT_WEIGHTS, Routing
from tests.helpers.cli import run_cli
from tests.helpers.errors import errors_of, one_line_error
from tests.helpers.platforms import example


def _deployment(**changes: Any) -> dict[str, Any]:
    (deployment,) = example("prefix-routing")["deployments"]
    deployment.update(changes)
    return dict(deployment)


def test_defaults_are_round_robin_failing_open_at_the_pinned_profiles_weights() -> None:
    assert Routing() == Routing(picker="round_robin", failure_mode="fail_open")
    assert not Routing().picks
    assert Routing().scorer_weights() == {}
    prefix = Routing(picker="prefix_cache")
    assert prefix.scorer_weights() == {"prefix_cache": 3, "kv_cache_utilization": 2, "queue": 2}
    assert Routing(picker="kv_cache_load").scorer_weights() == DEFAULT_WEIGHTS["kv_cache_load"]


def test_a_weight_overrides_its_scorer_and_zero_leaves_it_out() -> None:
    routing = Routing.model_validate({"picker": "prefix_cache", "weights": {"queue": 0}})
    assert routing.scorer_weights() == {"prefix_cache": 3, "kv_cache_utilization": 2}


def test_only_standalone_vllm_on_gpus_picks_endpoints() -> None:
    gpu = ModelDeploymentSpec.model_validate(_deployment())
    inf2 = ModelDeploymentSpec.model_validate(
        _deployment(
            instance_type="inf2.48xlarge",
            tensor_parallel_size=8,
            routing=None,
            weights={"prefix": "models/llama-3-8b/"},
            neuron={"allow_compile_at_startup": True},
        )
    )
    able = {e.name for e in registered_engines() if e.serves(PicksEndpoints, gpu)}
    assert able == {"vllm"}
    assert not any(e.serves(PicksEndpoints, inf2) for e in registered_engines())


@pytest.mark.parametrize(
    ("changes", "field", "expected"),
    [
        (
            {"engine": "rayservice"},
            "routing.picker",
            "does not stand behind the endpoint picker; set picker: round_robin (or remove "
            "routing), or use engine: vllm",
        ),
        (
            {"scaling": {"min_replicas": 1, "max_replicas": 1}},
            "routing.picker",
            "scaling.max_replicas is 1; set scaling.max_replicas (and min_replicas) to 2 or more",
        ),
        (
            {"routing": {"picker": "prefix_cache", "weights": {"prefix_cache": 101}}},
            "routing.weights.prefix_cache",
            "less than or equal to 100",
        ),
        (
            {"routing": {"picker": "prefix_cache", "weights": {"queue": -1}}},
            "routing.weights.queue",
            "greater than or equal to 0",
        ),
        (
            {"routing": {"picker": "kv_cache_load", "weights": {"prefix_cache": 1}}},
            "routing.weights.prefix_cache",
            "picker: kv_cache_load has no prefix_cache scorer",
        ),
        (
            {"routing": {"picker": "round_robin", "weights": {"queue": 1}}},
            "routing.weights",
            "picker: round_robin runs no scorers",
        ),
        (
            {
                "routing": {
                    "picker": "kv_cache_load",
                    "weights": {"queue": 0, "kv_cache_utilization": 0},
                }
            },
            "routing.weights",
            "every scorer of picker: kv_cache_load is weighted 0",
        ),
        ({"routing": {"picker": "random"}}, "routing.picker", "round_robin"),
        (
            {"routing": {"picker": "prefix_cache", "failure_mode": "ignore"}},
            "routing.failure_mode",
            "fail_open",
        ),
    ],
)
def test_routing_that_cannot_work_is_refused(
    changes: dict[str, Any], field: str, expected: str
) -> None:
    errors = errors_of(_deployment(**changes), ModelDeploymentSpec)
    assert expected in errors[field]


def test_one_replica_that_may_grow_is_accepted() -> None:
    spec = ModelDeploymentSpec.model_validate(
        _deployment(scaling={"min_replicas": 1, "max_replicas": 3, "autoscale": True})
    )
    assert spec.routing is not None
    assert spec.routing.picks


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"engine": "rayservice"}, "deployments.0.routing.picker"),
        ({"scaling": {"min_replicas": 1, "max_replicas": 1}}, "set scaling.max_replicas"),
        (
            {"routing": {"picker": "prefix_cache", "weights": {"queue": 500}}},
            "deployments.0.routing.weights.queue",
        ),
    ],
)
def test_the_console_script_refuses_it_in_one_line(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    data = example("prefix-routing")
    data["deployments"][0].update(changes)
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, expected)


def test_plan_notes_a_picker_that_may_run_with_one_replica() -> None:
    data = example("prefix-routing")
    two = PlatformSpec.model_validate(data)
    assert not [w for w in plan_platform(two).warnings if "picker" in w]
    data["deployments"][0]["scaling"] = {"min_replicas": 1, "max_replicas": 2, "autoscale": True}
    data["node_pools"][1]["max_size"] = 3
    (note,) = [
        w for w in plan_platform(PlatformSpec.model_validate(data)).warnings if "picker" in w
    ]
    assert note.startswith("deployment 'llama-routed': picker: prefix_cache chooses between")
    assert "with one replica every request goes to it" in note


def test_a_deployment_named_like_a_pickers_service_is_refused() -> None:
    data = example("prefix-routing")
    (routed,) = data["deployments"]
    data["deployments"].append({**routed, "name": "llama-routed-proxy", "routing": None})
    data["node_pools"][1]["max_size"] = 6
    errors = errors_of(data)
    assert "needs the Service 'llama-routed-proxy'" in errors["deployments.1.name"]


def test_a_routed_deployment_is_refused_as_a_splits_target() -> None:
    data = example("prefix-routing")
    (routed,) = data["deployments"]
    data["deployments"].append({**routed, "name": "llama-plain", "routing": None})
    data["node_pools"][1]["max_size"] = 6
    data["endpoint"]["splits"] = [
        {
            "name": "chat",
            "traffic": [
                {"deployment": "llama-routed", "weight": 90},
                {"deployment": "llama-plain", "weight": 10},
            ],
        }
    ]
    errors = errors_of(data)
    assert "routes through its endpoint picker" in errors["endpoint.splits.0.traffic.0.deployment"]
