"""An engine registered from the test suite alone goes through the whole path, unchanged.

The toy engine (``toy_engine.py`` beside this file) is registered in a copy of the registry, so
the package is not changed and no other test sees it. It is then validated as a spec, rendered
with every chart of a deployment (server, network policies, monitors, dashboard, Ingress),
recorded in the contract, scheduled on its pool and routed by the load balancer: every place
that depends on the engine asks the engine.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from pydantic import ValidationError

from eks_inference.charts.ingress import ALB_ANNOTATION_PREFIX
from eks_inference.charts.render import render_platform
from eks_inference.names import COMPONENT_LABEL, INSTANCE_LABEL
from eks_inference.observability.dashboards import dashboard
from eks_inference.observability.signals import signals_of
from eks_inference.specification import engine_registry
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import KUBERNETES_VERSION
from tests.engines.toy_engine import COMPONENT, ToyEngine, ToyOptions, toy_options
from tests.helpers.objects import is_custom_resource, of_kind, one
from tests.helpers.rendered import CONTEXT

TOY = {
    "name": "toy-7b",
    "model": "mistral-7b",
    "instance_type": "g6e.2xlarge",
    "engine": "toy",
    "scaling": {"min_replicas": 2, "max_replicas": 2},
    "weights": {"prefix": "models/mistral-7b/"},
}
PLATFORM: dict[str, Any] = {
    "cluster_name": "toys",
    "region": "us-east-1",
    "account_id": "111122223333",
    "model_bucket_name": "eks-inference-models-example",
    "endpoint": {"scheme": "internal", "routing": "path", "authentication": "api_key"},
    "node_pools": [
        {"name": "system", "instance_types": ["m6i.2xlarge"], "min_size": 2, "max_size": 4},
        {"name": "g6e", "instance_types": ["g6e.2xlarge"], "max_size": 4},
    ],
    "deployments": [TOY],
}


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> ToyEngine:
    registry = engine_registry.ENGINES.copy()
    toy = ToyEngine()
    registry.register(toy)
    monkeypatch.setattr(engine_registry, "ENGINES", registry)
    return toy


def _problems(error: ValidationError) -> dict[tuple[int | str, ...], str]:
    return {tuple(e["loc"]): e["msg"] for e in error.errors()}


def test_an_unregistered_engine_fails_naming_the_field_and_the_registered_engines() -> None:
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(TOY)
    assert _problems(raised.value) == {
        ("engine",): "unknown engine 'toy'; use one of vllm, rayservice, kserve, triton, dynamo "
        "(or register an engine of that name)"
    }


def test_a_registered_engine_validates_and_runs_its_own_rules(toy_registered: ToyEngine) -> None:
    assert ModelDeploymentSpec.model_validate(TOY).engine == "toy"
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(
            {**TOY, "scaling": {"min_replicas": 1, "max_replicas": 3}}
        )
    assert _problems(raised.value) == {
        ("scaling", "max_replicas"): "engine: toy runs a fixed number of replicas; set "
        "max_replicas = min_replicas (1)"
    }


def test_an_engine_refuses_the_accelerators_and_loaders_it_does_not_run_with(
    toy_registered: ToyEngine,
) -> None:
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(
            {
                **TOY,
                "instance_type": "inf2.8xlarge",
                "model": "llama-3-8b",
                "neuron": {"allow_compile_at_startup": True},
                "weights": {"prefix": "models/m/", "loader": "runai_streamer"},
            }
        )
    problems = _problems(raised.value)
    assert problems[("engine",)] == (
        "engine toy (a toy vLLM Deployment) runs only on a GPU instance, not inf2.8xlarge; "
        "use another instance type, or engine: vllm or rayservice"
    )
    assert problems[("weights", "loader")] == (
        "runai_streamer works only for engine: vllm on a GPU instance, engine: kserve on a GPU "
        "instance; use loader: mountpoint here"
    )


def test_the_json_schema_lists_the_registered_engines(toy_registered: ToyEngine) -> None:
    schema = ModelDeploymentSpec.model_json_schema()
    assert schema["properties"]["engine"]["enum"] == [
        "vllm",
        "rayservice",
        "kserve",
        "triton",
        "dynamo",
        "toy",
    ]


def test_a_registry_refuses_a_second_engine_of_a_taken_name(toy_registered: ToyEngine) -> None:
    with pytest.raises(ValueError, match="engine 'toy' is already registered"):
        engine_registry.ENGINES.register(ToyEngine())
    engine_registry.ENGINES.register(toy_registered)
    with pytest.raises(ValueError, match="must be 1-30 lowercase letters"):
        engine_registry.ENGINES.register(type("Bad", (ToyEngine,), {"name": "Bad Name"})())


def test_the_toy_engine_renders_through_every_chart(toy_registered: ToyEngine) -> None:
    platform = PlatformSpec.model_validate(PLATFORM)
    (spec,) = platform.deployments
    objects = render_platform(platform, CONTEXT)[spec.name]
    for obj in objects:
        if not is_custom_resource(obj):
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    deployment = one(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_labels[COMPONENT_LABEL] == COMPONENT
    # Its flows: the serving and metrics policies select its pods by its component.
    serving = next(
        p for p in of_kind(objects, "NetworkPolicy") if p["metadata"]["name"].endswith("-serving")
    )
    components = serving["spec"]["podSelector"]["matchExpressions"][0]["values"]
    assert components == [COMPONENT]
    # Its monitors: one PodMonitor on its port, for its pods.
    monitor = one(objects, "PodMonitor")
    assert monitor["metadata"]["name"] == "toy-7b-toy"
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    assert monitor["spec"]["selector"]["matchLabels"] == {
        INSTANCE_LABEL: spec.name,
        COMPONENT_LABEL: COMPONENT,
    }
    # Its backend: the Ingress sends the OpenAI API to its Service and checks its health path.
    ingress = one(objects, "Ingress")
    (rule,) = ingress["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["backend"]["service"]["name"] == "toy-7b-toy"
    annotations = ingress["metadata"]["annotations"]
    assert annotations[f"{ALB_ANNOTATION_PREFIX}healthcheck-path"] == "/health"
    # Its metrics: the dashboard is titled with its kind and reads its vocabulary.
    board = dashboard(spec)
    assert board["title"] == "toy-7b: Toy vLLM on GPU"
    assert "toy-gpu" in board["tags"]
    assert signals_of(spec).autoscaled_by == "fixed size"


def test_the_toy_engines_services_take_part_in_the_name_rules(toy_registered: ToyEngine) -> None:
    clash = {**TOY, "name": "toy-7b-toy", "engine": "vllm"}
    with pytest.raises(ValidationError, match="needs the Service 'toy-7b-toy'"):
        PlatformSpec.model_validate({**PLATFORM, "deployments": [TOY, clash]})


def test_the_toy_engines_options_are_validated_with_their_own_field_paths(
    toy_registered: ToyEngine,
) -> None:
    spec = ModelDeploymentSpec.model_validate({**TOY, "options": {"extra_paths": ["/tokenize"]}})
    assert toy_options(spec) == ToyOptions(extra_paths=("/tokenize",))
    # Absent options are the defaults, and survive a round trip through model_dump().
    defaulted = ModelDeploymentSpec.model_validate(TOY)
    assert toy_options(defaulted) == ToyOptions()
    assert ModelDeploymentSpec.model_validate(spec.model_dump()) == spec
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(
            {**TOY, "options": {"extra_paths": ["tokenize"], "warm_replica": 1}}
        )
    problems = _problems(raised.value)
    assert set(problems) == {("options", "extra_paths", 0), ("options", "warm_replica")}
    assert "should match pattern" in problems[("options", "extra_paths", 0)]
    assert problems[("options", "warm_replica")] == "unknown field; did you mean warm_replicas?"


def test_the_toy_engines_own_rule_reads_its_option(toy_registered: ToyEngine) -> None:
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate({**TOY, "options": {"warm_replicas": 3}})
    assert _problems(raised.value) == {
        ("options", "warm_replicas"): "warm_replicas (3) exceeds scaling.min_replicas (2); keep "
        "at most that many warm"
    }


def test_the_toy_engines_options_are_refused_on_other_engines(toy_registered: ToyEngine) -> None:
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(
            {**TOY, "engine": "vllm", "options": {"extra_paths": ["/tokenize"]}}
        )
    assert _problems(raised.value) == {
        ("options",): "engine vllm has no options; remove options (engines with options: "
        "kserve, triton, dynamo, toy)"
    }


def test_the_json_schema_offers_the_toy_engines_options(toy_registered: ToyEngine) -> None:
    schema = ModelDeploymentSpec.model_json_schema()
    choices = schema["properties"]["options"]["anyOf"]
    assert [choice.get("x-engine") for choice in choices] == [
        "kserve",
        "triton",
        "dynamo",
        "toy",
        None,
    ]
    toy = next(choice for choice in choices if choice.get("x-engine") == "toy")
    toy_schema = schema["$defs"][toy["$ref"].rsplit("/", 1)[1]] if "$ref" in toy else toy
    assert toy_schema["properties"]["warm_replicas"] == {
        "default": 1,
        "description": "Replicas that must stay up; at most min_replicas.",
        "maximum": 100,
        "minimum": 0,
        "title": "Warm Replicas",
        "type": "integer",
    }
    (condition,) = [c for c in schema["allOf"] if c["if"]["properties"]["engine"]["const"] == "toy"]
    assert condition["then"]["properties"]["options"] == {
        key: value for key, value in toy.items() if key != "x-engine"
    }


def test_the_toy_engines_extra_paths_reach_the_load_balancer_behind_the_key(
    toy_registered: ToyEngine,
) -> None:
    with_paths = {**TOY, "options": {"extra_paths": ["/tokenize"]}}
    platform = PlatformSpec.model_validate({**PLATFORM, "deployments": [with_paths]})
    (route,) = platform.routes().values()
    assert route.api_paths == ("/v1", "/tokenize")
    assert route.api_key
    ingress = one(render_platform(platform, CONTEXT)["toy-7b"], "Ingress")
    (rule,) = ingress["spec"]["rules"]
    paths = [(p["path"], p["backend"]["service"]["name"]) for p in rule["http"]["paths"]]
    assert paths == [("/toy-7b/v1", "toy-7b-toy"), ("/toy-7b/tokenize", "toy-7b-toy")]
