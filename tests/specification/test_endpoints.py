"""The platform's endpoint: what must hold before anything is exposed, each failure under its
field; routes without collisions; the idle timeout rule."""

from __future__ import annotations

import math
from typing import Any

import pytest

from eks_inference.catalog import sizing
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.routes import (
    IDLE_TIMEOUT_MARGIN,
    MAX_IDLE_TIMEOUT_S,
    MAX_LISTENER_RULES,
    MAX_TARGET_GROUPS,
    MIN_IDLE_TIMEOUT_S,
    api_key_secret_name,
    idle_timeout_seconds,
    load_balancer_group,
)
from eks_inference.specification.service_names import services
from tests.helpers.errors import errors_of
from tests.helpers.platforms import REFERENCE_PLATFORM, reference

CERTIFICATE = "arn:aws:acm:us-east-1:111122223333:certificate/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def with_endpoint(**endpoint: Any) -> dict[str, Any]:
    data = reference()
    data["endpoint"] = endpoint
    return data


# -- the reference app ----------------------------------------------------------------------


def test_the_reference_app_exposes_every_deployment_on_one_internal_load_balancer() -> None:
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    routes = platform.routes()
    assert set(routes) == {d.name for d in platform.deployments}
    assert {r.load_balancer for r in routes.values()} == {load_balancer_group("eks-inference")}
    assert {r.scheme for r in routes.values()} == {"internal"}
    assert {r.path for r in routes.values()} == {f"/{d.name}" for d in platform.deployments}
    assert all(r.api_key and r.host is None and r.protocol == "http" for r in routes.values())


def test_nothing_is_exposed_without_an_endpoint_or_with_expose_false() -> None:
    data = reference()
    del data["endpoint"]
    assert PlatformSpec.model_validate(data).routes() == {}
    data = reference()
    data["deployments"][1]["endpoint"] = {"expose": False}
    routes = PlatformSpec.model_validate(data).routes()
    assert set(routes) == {"llama3-8b-inf2", "qwen25-7b-g6e"}


def test_the_default_endpoint_is_internal_with_api_keys() -> None:
    routes = PlatformSpec.model_validate(with_endpoint()).routes()
    assert {(r.scheme, r.api_key, r.protocol) for r in routes.values()} == {
        ("internal", True, "http")
    }


# -- internet-facing needs TLS, authentication and known client networks --------------------


def test_internet_facing_without_a_certificate_fails_naming_the_field() -> None:
    errors = errors_of(with_endpoint(scheme="internet-facing", source_cidrs=["203.0.113.0/24"]))
    assert set(errors) == {"endpoint.certificate_arn"}
    assert "must use HTTPS" in errors["endpoint.certificate_arn"]


def test_internet_facing_without_authentication_fails_naming_the_field() -> None:
    errors = errors_of(
        with_endpoint(
            scheme="internet-facing",
            certificate_arn=CERTIFICATE,
            source_cidrs=["0.0.0.0/0"],
            authentication="none",
        )
    )
    assert set(errors) == {"endpoint.authentication"}
    assert "authentication: api_key" in errors["endpoint.authentication"]


def test_internet_facing_needs_explicit_client_networks() -> None:
    errors = errors_of(with_endpoint(scheme="internet-facing", certificate_arn=CERTIFICATE))
    assert set(errors) == {"endpoint.source_cidrs"}
    assert "0.0.0.0/0" in errors["endpoint.source_cidrs"]


def test_every_missing_piece_is_reported_at_once() -> None:
    errors = errors_of(with_endpoint(scheme="internet-facing", authentication="none"))
    assert set(errors) == {
        "endpoint.certificate_arn",
        "endpoint.authentication",
        "endpoint.source_cidrs",
    }


def test_a_complete_internet_facing_endpoint_is_https() -> None:
    platform = PlatformSpec.model_validate(
        with_endpoint(
            scheme="internet-facing",
            certificate_arn=CERTIFICATE,
            source_cidrs=["203.0.113.0/24"],
            host="models.example.com",
        )
    )
    route = platform.routes()["mistral-7b-g6e"]
    assert route.scheme == "internet-facing"
    assert route.base_url() == "https://models.example.com/mistral-7b-g6e/v1"


def test_an_internal_endpoint_may_go_without_authentication() -> None:
    routes = PlatformSpec.model_validate(with_endpoint(authentication="none")).routes()
    assert not any(r.api_key for r in routes.values())


@pytest.mark.parametrize(
    ("endpoint", "field", "expected"),
    [
        ({"source_cidrs": ["10.0.0.1/8"]}, "endpoint.source_cidrs.0", "host bits zero"),
        ({"source_cidrs": ["2001:db8::/32"]}, "endpoint.source_cidrs.0", "IPv4"),
        ({"certificate_arn": "arn:aws:iam::1:cert/x"}, "endpoint.certificate_arn", "pattern"),
        ({"routing": "host"}, "endpoint.host", "routing: host"),
        ({"host": "Models.Example.com"}, "endpoint.host", "pattern"),
        ({"scheme": "public"}, "endpoint.scheme", "internal"),
    ],
)
def test_bad_endpoint_fields(endpoint: dict[str, Any], field: str, expected: str) -> None:
    errors = errors_of(with_endpoint(**endpoint))
    assert expected in errors[field], errors


# -- routes: one load balancer, no collisions ------------------------------------------------


def test_path_routing_default_paths_and_a_custom_one() -> None:
    data = reference()
    data["deployments"][0]["endpoint"] = {"path": "/team-a/llama"}
    routes = PlatformSpec.model_validate(data).routes()
    assert routes["llama3-8b-inf2"].path == "/team-a/llama"
    assert routes["mistral-7b-g6e"].path == "/mistral-7b-g6e"


def test_a_path_collision_fails_naming_both_fields() -> None:
    data = reference()
    data["deployments"][2]["endpoint"] = {"path": "/mistral-7b-g6e"}
    errors = errors_of(data)
    message = errors["deployments.2.endpoint.path"]
    assert "'qwen25-7b-g6e' overlaps the route of deployment 'mistral-7b-g6e'" in message
    assert "deployments.1.endpoint.path" in message


def test_a_path_below_another_route_collides() -> None:
    data = reference()
    data["deployments"][2]["endpoint"] = {"path": "/mistral-7b-g6e/qwen"}
    assert "deployments.2.endpoint.path" in errors_of(data)


def test_paths_that_only_share_characters_do_not_collide() -> None:
    data = reference()
    data["deployments"][0]["endpoint"] = {"path": "/models"}
    data["deployments"][2]["endpoint"] = {"path": "/models-qwen"}
    assert len(PlatformSpec.model_validate(data).routes()) == 3


def test_the_same_path_on_different_hosts_does_not_collide() -> None:
    data = reference()
    data["deployments"][1]["endpoint"] = {"path": "/chat", "host": "a.example.com"}
    data["deployments"][2]["endpoint"] = {"path": "/chat", "host": "b.example.com"}
    assert len(PlatformSpec.model_validate(data).routes()) == 3


def test_a_route_for_any_host_collides_with_one_for_a_host() -> None:
    # No host condition matches every host, so /chat on any host shadows /chat on b.
    data = reference()
    data["deployments"][1]["endpoint"] = {"path": "/chat"}
    data["deployments"][2]["endpoint"] = {"path": "/chat", "host": "b.example.com"}
    assert "deployments.2.endpoint.path" in errors_of(data)


def test_host_routing_names_each_deployment_and_rejects_equal_hosts() -> None:
    data = with_endpoint(routing="host", host="models.example.com")
    routes = PlatformSpec.model_validate(data).routes()
    assert routes["qwen25-7b-g6e"].host == "qwen25-7b-g6e.models.example.com"
    assert routes["qwen25-7b-g6e"].path is None
    data["deployments"][2]["endpoint"] = {"host": "mistral-7b-g6e.models.example.com"}
    errors = errors_of(data)
    assert (
        "overlaps the route of deployment 'mistral-7b-g6e'" in errors["deployments.2.endpoint.host"]
    )


def test_a_path_with_host_routing_fails_naming_it() -> None:
    data = with_endpoint(routing="host", host="models.example.com")
    data["deployments"][0]["endpoint"] = {"path": "/llama"}
    assert "routes by host" in errors_of(data)["deployments.0.endpoint.path"]


def test_a_deployment_route_without_a_platform_endpoint_fails() -> None:
    data = reference()
    del data["endpoint"]
    data["deployments"][0]["endpoint"] = {"path": "/llama"}
    assert "no load balancer" in errors_of(data)["deployments.0.endpoint"]


def test_a_bad_path_fails_naming_the_field() -> None:
    data = reference()
    data["deployments"][0]["endpoint"] = {"path": "/Llama/"}
    assert "deployments.0.endpoint.path" in errors_of(data)


def _many(count: int) -> dict[str, Any]:
    data = reference()
    data["node_pools"][2]["max_size"] = 1000
    template = data["deployments"][1]
    data["deployments"] = [
        {**template, "name": f"m{i}", "scaling": {"min_replicas": 1, "max_replicas": 1}}
        for i in range(count)
    ]
    return data


def test_a_load_balancer_holds_100_routes_one_rule_each() -> None:
    # One listener rule per vLLM deployment (its API path): the ALB's 100 rules hold 100.
    assert MAX_LISTENER_RULES == MAX_TARGET_GROUPS == 100
    assert len(PlatformSpec.model_validate(_many(100)).routes()) == 100
    errors = errors_of(_many(101))
    assert errors["endpoint"].startswith(
        "the load balancer would need 101 listener rules, 101 for the API paths of 101 "
        "exposed deployments (one per path) and 0 for 0 splits, over the 100 an ALB holds;"
    )
    assert "\n" not in errors["endpoint"]


# -- the networks an internal load balancer accepts -------------------------------------------


def test_routes_carry_only_the_networks_the_endpoint_lists() -> None:
    """Without ``source_cidrs`` a route lists none: the Ingress then accepts the cluster's VPC,
    whose range only the render context knows (a VPC of the user's own may be any range)."""
    routes = PlatformSpec.model_validate(with_endpoint()).routes()
    assert {r.source_cidrs for r in routes.values()} == {()}
    given = with_endpoint(source_cidrs=["10.0.0.0/16", "192.168.0.0/16"])
    routes = PlatformSpec.model_validate(given).routes()
    assert {r.source_cidrs for r in routes.values()} == {("10.0.0.0/16", "192.168.0.0/16")}


# -- names the deployments' objects share ----------------------------------------------------


def test_a_vllm_deployment_named_after_a_rayservices_serve_service_is_rejected() -> None:
    """``x`` (RayService) and ``x-serve-svc`` (vLLM) would both own the Service
    ``x-serve-svc``, and both Ingresses would send requests to it."""
    data = reference()
    ray, vllm = data["deployments"][0], data["deployments"][1]
    assert (ray["engine"], vllm["engine"]) == ("rayservice", "vllm")
    vllm["name"] = f"{ray['name']}-serve-svc"
    errors = errors_of(data)
    assert set(errors) == {"deployments.1.name"}
    assert "Service 'llama3-8b-inf2-serve-svc'" in errors["deployments.1.name"]
    assert "deployments.0.name" in errors["deployments.1.name"]
    assert "\n" not in errors["deployments.1.name"]


def test_the_rule_holds_in_either_order_and_for_the_head_service() -> None:
    data = reference()
    # The vLLM deployment comes first here, the RayService whose head Service it takes later.
    data["deployments"][1]["name"] = "x-head-svc"
    data["deployments"][2]["name"] = "x"
    assert data["deployments"][2]["engine"] == "rayservice"
    errors = errors_of(data)
    assert set(errors) == {"deployments.2.name"}
    assert "deployments.1.name" in errors["deployments.2.name"]


def test_the_rule_applies_without_a_load_balancer_too() -> None:
    data = reference()
    del data["endpoint"]
    data["deployments"][1]["name"] = f"{data['deployments'][0]['name']}-serve-svc"
    assert set(errors_of(data)) == {"deployments.1.name"}


def test_services_name_what_charts_and_kuberay_create() -> None:
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    ray, vllm, _ = platform.deployments
    assert services(vllm) == (vllm.name,)
    assert services(ray) == (f"{ray.name}-head-svc", f"{ray.name}-serve-svc")


# -- the idle timeout ------------------------------------------------------------------------


def _decode_seconds(spec: ModelDeploymentSpec) -> float:
    """max_model_len tokens at one sequence's share of the plan's decode bound."""
    bound = sizing.decode_tokens_per_second_bound(
        spec.model.architecture,
        spec.instance,
        spec.tensor_parallel_size,
        spec.limits.max_model_len,
        spec.limits.max_num_seqs,
    )
    per_sequence = bound / spec.replicas_per_node / spec.limits.max_num_seqs
    return spec.limits.max_model_len / per_sequence


def test_idle_timeout_covers_max_model_len_at_the_decode_bound_never_below_300() -> None:
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    for spec in platform.deployments:
        expected = max(MIN_IDLE_TIMEOUT_S, math.ceil(IDLE_TIMEOUT_MARGIN * _decode_seconds(spec)))
        assert idle_timeout_seconds(spec) == expected
        assert idle_timeout_seconds(spec) >= MIN_IDLE_TIMEOUT_S
    timeouts = {d.name: idle_timeout_seconds(d) for d in platform.deployments}
    # Llama on inf2 is fast enough for the floor; an 8k context on one L40S is not.
    assert timeouts["llama3-8b-inf2"] == MIN_IDLE_TIMEOUT_S
    assert timeouts["mistral-7b-g6e"] > MIN_IDLE_TIMEOUT_S
    # The load balancer's timeout is the longest its deployments need, on every route.
    assert {r.idle_timeout_seconds for r in platform.routes().values()} == {max(timeouts.values())}


def test_idle_timeout_grows_with_the_context() -> None:
    data = reference()["deployments"][1]
    short = ModelDeploymentSpec.model_validate(
        {**data, "limits": {"max_model_len": 4096, "max_num_seqs": 8}}
    )
    long = ModelDeploymentSpec.model_validate(
        {**data, "limits": {"max_model_len": 16384, "max_num_seqs": 8}}
    )
    assert idle_timeout_seconds(short) == MIN_IDLE_TIMEOUT_S
    assert idle_timeout_seconds(long) > 2 * MIN_IDLE_TIMEOUT_S


def test_a_deployment_beyond_the_albs_idle_timeout_fails_naming_max_model_len() -> None:
    # Llama 3.1 70B with its full 128k context on eight L40S: one sequence takes about an hour.
    data = reference()
    # TP 8 spans both NUMA nodes of a g6e.48xlarge: its pool lets replicas span them.
    data["node_pools"].append(
        {
            "name": "g6e-48",
            "instance_types": ["g6e.48xlarge"],
            "max_size": 2,
            "topology_manager_policy": "restricted",
        }
    )
    data["deployments"].append(
        {
            "name": "llama-70b-long",
            "model": "llama-3.1-70b",
            "instance_type": "g6e.48xlarge",
            "engine": "vllm",
            "tensor_parallel_size": 8,
            "limits": {"max_model_len": 131072, "max_num_seqs": 1},
            "weights": {"prefix": "models/llama-3.1-70b/"},
        }
    )
    spec = ModelDeploymentSpec.model_validate(data["deployments"][3])
    assert idle_timeout_seconds(spec) > MAX_IDLE_TIMEOUT_S
    errors = errors_of(data)
    assert set(errors) == {"deployments.3.limits.max_model_len"}
    assert f"beyond the {MAX_IDLE_TIMEOUT_S} s idle timeout" in next(iter(errors.values()))
    data["deployments"][3]["endpoint"] = {"expose": False}
    assert "llama-70b-long" not in PlatformSpec.model_validate(data).routes()


def test_names_derived_from_the_cluster() -> None:
    assert load_balancer_group("Inference-Prod") == "inference-prod"
    long = load_balancer_group("c" * 100)
    assert len(long) == 63
    assert long != load_balancer_group("c" * 99)
    assert api_key_secret_name("eks-inference") == "eks-inference/api-key"
