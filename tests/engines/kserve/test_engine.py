"""KServe on Knative (``engine: kserve``): its rules, its objects against the pinned schemas, the
Knative field mask, the contract record, routing through Kourier and its network flows."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from eks_inference import names
from eks_inference.charts.render import render_platform
from eks_inference.charts.serving import ServerInputs, engine_needs, serving_engine
from eks_inference.charts.vllm_server import vllm_server_args
from eks_inference.engines.kserve import engine as kserve
from eks_inference.engines.kserve.knative import (
    REVISION_FEATURES,
    knative_namespaces,
    knative_pod_monitor,
    knative_serving,
)
from eks_inference.metrics import unknown_metrics
from eks_inference.observability.dashboards import dashboard, expressions
from eks_inference.ops.scale_to_zero import scales_to_zero
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.routes import idle_timeout_seconds
from eks_inference.specification.startup_budget import (
    NODE_AND_IMAGE_SECONDS,
    model_load_seconds,
    rollout_seconds,
)
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.objects import crd_validator, is_custom_resource, of_kind, one, schema_errors
from tests.helpers.platforms import CRDS, REPO
from tests.helpers.rendered import CONTEXT

EXAMPLE = REPO / "examples" / "kserve-platform.yaml"
INFERENCESERVICE_CRD = CRDS / "serving.kserve.io_inferenceservices.yaml"
KNATIVESERVING_CRD = CRDS / "operator.knative.dev_knativeservings.yaml"
PODMONITOR_CRD = CRDS / "monitoring.coreos.com_podmonitors.yaml"
# Fields Knative Serving 1.21.3 accepts in a revision's pod and container
# (pkg/apis/serving/fieldmask.go: PodSpecMask with the features the platform's KnativeServing
# enables, ContainerMask), and the serving port names it accepts (k8s_validation.go).
KNATIVE_POD_FIELDS = frozenset(
    {
        "serviceAccountName",
        "containers",
        "volumes",
        "imagePullSecrets",
        "enableServiceLinks",
        "automountServiceAccountToken",
        "nodeSelector",
        "tolerations",
        "securityContext",
    }
)
KNATIVE_CONTAINER_FIELDS = frozenset(
    {
        "name",
        "args",
        "command",
        "env",
        "workingDir",
        "envFrom",
        "image",
        "imagePullPolicy",
        "livenessProbe",
        "ports",
        "readinessProbe",
        "resources",
        "securityContext",
        "startupProbe",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "volumeMounts",
    }
)
KNATIVE_PORT_NAMES = frozenset({"", "http1", "h2c"})
# ComponentExtensionSpec fields of a KServe predictor (the rest of it is the pod).
PREDICTOR_EXTENSION_FIELDS = frozenset(
    {"minReplicas", "maxReplicas", "scaleMetric", "scaleTarget", "timeout"}
)

G6E_70B = {
    "name": "llama70-kserve",
    "model": "llama-3.1-70b",
    "instance_type": "g6e.48xlarge",
    "engine": "kserve",
    "tensor_parallel_size": 8,
    "limits": {"max_model_len": 4096, "max_num_seqs": 16},
    "scaling": {"min_replicas": 0, "max_replicas": 1},
    "weights": {"prefix": "models/llama-3.1-70b/"},
}


@cache
def _platform() -> PlatformSpec:
    return PlatformSpec.from_yaml(EXAMPLE)


@cache
def _objects() -> dict[str, list[dict[str, Any]]]:
    return render_platform(_platform(), CONTEXT)


def _spec() -> ModelDeploymentSpec:
    (spec,) = _platform().deployments
    return spec


def _service() -> dict[str, Any]:
    return one(_objects()[_spec().name], "InferenceService")


def _problems(error: ValidationError) -> dict[str, str]:
    return {".".join(map(str, e["loc"])): e["msg"] for e in error.errors()}


def _with(**changes: Any) -> dict[str, Any]:
    spec = dict(yaml.safe_load(EXAMPLE.read_text())["deployments"][0])
    spec.update(changes)
    return spec


def test_the_example_platform_validates_and_scales_to_zero() -> None:
    spec = _spec()
    assert spec.engine == "kserve"
    assert (spec.scaling.min_replicas, spec.scaling.max_replicas) == (0, 2)
    assert scales_to_zero(spec)


def test_every_object_validates_strictly_against_its_schema() -> None:
    isvc = crd_validator(INFERENCESERVICE_CRD, "v1beta1")
    pod_monitor = crd_validator(PODMONITOR_CRD, "v1")
    for obj in [o for objects in _objects().values() for o in objects]:
        if obj["kind"] == "InferenceService":
            assert schema_errors(isvc, obj) == []
        elif obj["kind"] == "PodMonitor":
            assert schema_errors(pod_monitor, obj) == []
        elif not is_custom_resource(obj):
            assert kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_platforms_knative_objects_validate_against_the_pinned_crds() -> None:
    serving = knative_serving(_platform().node_pools[0])
    assert schema_errors(crd_validator(KNATIVESERVING_CRD, "v1beta1"), serving) == []
    monitor = knative_pod_monitor()
    assert schema_errors(crd_validator(PODMONITOR_CRD, "v1"), monitor) == []
    for namespace in knative_namespaces():
        assert kubernetes_validate.validate(namespace, KUBERNETES_VERSION, strict=True)
    assert set(serving["spec"]["config"]["features"]) == set(REVISION_FEATURES)


def test_the_predictor_is_a_pod_knative_accepts() -> None:
    predictor = _service()["spec"]["predictor"]
    pod = {k: v for k, v in predictor.items() if k not in PREDICTOR_EXTENSION_FIELDS}
    assert set(pod) <= KNATIVE_POD_FIELDS, set(pod) - KNATIVE_POD_FIELDS
    assert pod["automountServiceAccountToken"] is False  # the only value Knative accepts
    (container,) = pod["containers"]
    assert container["name"] == kserve.CONTAINER_NAME
    assert set(container) <= KNATIVE_CONTAINER_FIELDS, set(container) - KNATIVE_CONTAINER_FIELDS
    (port,) = container["ports"]
    assert port["name"] in KNATIVE_PORT_NAMES
    assert port["containerPort"] not in (8012, 8013, 8022, 9090, 9091)  # queue-proxy's
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == port["containerPort"]
    assert container["securityContext"]["privileged"] is False


def test_the_predictor_runs_the_standalone_vllm_server() -> None:
    spec = _spec()
    (container,) = _service()["spec"]["predictor"]["containers"]
    assert container["command"] == ["vllm", "serve"]
    args = container["args"]
    expected = vllm_server_args(spec, bucket_name=CONTEXT.bucket_name)
    assert args[: len(expected)] == expected
    # Exposed with the API key: the shipped middleware, the key from the Secret only.
    assert args[len(expected) :] == ["--middleware", "api_key_auth.VLLMAPIKeyMiddleware"]
    assert "--api-key" not in args
    secret_env = [e for e in container["env"] if "valueFrom" in e]
    assert [e["name"] for e in secret_env] == ["VLLM_API_KEY"]


def test_scaling_and_cold_start_settings_come_from_the_spec() -> None:
    spec = _spec()
    service = _service()
    predictor = service["spec"]["predictor"]
    assert predictor["minReplicas"] == 0
    assert predictor["maxReplicas"] == 2
    assert predictor["scaleMetric"] == "concurrency"
    assert predictor["scaleTarget"] == spec.target_ongoing_requests == 12
    assert predictor["timeout"] == idle_timeout_seconds(spec)
    annotations = service["metadata"]["annotations"]
    assert annotations[kserve.DEPLOYMENT_MODE_ANNOTATION] == "Knative"
    assert annotations[kserve.RETENTION_ANNOTATION] == "1800s"
    assert annotations[kserve.INITIAL_SCALE_ANNOTATION] == "1"
    assert annotations[kserve.PROGRESS_DEADLINE_ANNOTATION] == f"{rollout_seconds(spec)}s"
    assert service["metadata"]["labels"][kserve.VISIBILITY_LABEL] == "cluster-local"


def test_the_contract_records_what_the_objects_need() -> None:
    spec = _spec()
    content = serving_engine(spec).server(
        ServerInputs(
            spec, _platform().placement(spec), CONTEXT, None, None, _platform().routes()[spec.name]
        )
    )
    needs = content.needs
    kinds = {o["kind"] for o in content.objects}
    assert kinds == {"ServiceAccount", "ConfigMap", "InferenceService"}
    # The CRD, of an optional add-on, is what the engine needs before anything renders.
    assert engine_needs(spec).custom_resources == (names.INFERENCESERVICE_CRD,)
    assert needs.namespaces == (names.INFERENCE_NAMESPACE,)
    (identity,) = needs.service_accounts  # the Run:ai streamer reads its prefix
    assert identity.name == one(list(content.objects), "ServiceAccount")["metadata"]["name"]
    assert identity.reads == (spec.weights.prefix,)
    assert [s.name for s in needs.secrets] == [names.API_KEY_SECRET]
    (pod_need,) = needs.pods
    assert pod_need.path == (f"InferenceService/{spec.name}", "spec", "predictor")
    assert pod_need.pool == "g6e"
    assert len(pod_need.requests) == 2  # vLLM and Knative's queue-proxy


def test_the_load_balancer_reaches_the_predictor_through_kourier() -> None:
    spec = _spec()
    (ingress,) = of_kind(_objects()[spec.name], "Ingress")
    assert ingress["metadata"]["namespace"] == names.KOURIER_NAMESPACE
    (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
    assert path["path"] == f"/{spec.name}/v1"
    assert path["backend"]["service"] == {
        "name": names.KOURIER_INTERNAL_SERVICE,
        "port": {"number": names.KOURIER_INTERNAL_PORT},
    }
    annotations = ingress["metadata"]["annotations"]
    transforms = json.loads(
        annotations[f"alb.ingress.kubernetes.io/transforms.{names.KOURIER_INTERNAL_SERVICE}"]
    )
    assert [t["type"] for t in transforms] == ["url-rewrite", "host-header-rewrite"]
    (host,) = transforms[1]["hostHeaderRewriteConfig"]["rewrites"]
    assert host["replace"] == f"{spec.name}-predictor.inference.svc.cluster.local"
    # The gateway's readiness, so a model scaled to zero is never an unhealthy target.
    assert annotations["alb.ingress.kubernetes.io/healthcheck-path"] == "/ready"
    assert annotations["alb.ingress.kubernetes.io/healthcheck-port"] == "9000"
    # The idle timeout covers a cold first request.
    attributes = annotations["alb.ingress.kubernetes.io/load-balancer-attributes"]
    assert f"idle_timeout.timeout_seconds={idle_timeout_seconds(spec)}" in attributes
    assert idle_timeout_seconds(spec) > rollout_seconds(spec)


def test_only_knative_reaches_the_queue_proxy() -> None:
    spec = _spec()
    policies = {p["metadata"]["name"]: p for p in of_kind(_objects()[spec.name], "NetworkPolicy")}
    knative = policies[f"{spec.name}-knative"]["spec"]
    (requests, autoscaler) = knative["ingress"]
    assert [p["port"] for p in requests["ports"]] == [kserve.QUEUE_PROXY_PORT]
    peers = [p["podSelector"]["matchLabels"] for p in requests["from"]]
    assert peers == [names.KOURIER_GATEWAY_LABELS, names.KNATIVE_ACTIVATOR_LABELS]
    assert [p["port"] for p in autoscaler["ports"]] == [kserve.AUTOSCALER_METRICS_PORT]
    assert policies[f"{spec.name}-metrics"]["spec"]["ingress"][0]["ports"] == [
        {"port": kserve.USER_PORT_NAME, "protocol": "TCP"}
    ]


def test_dashboard_and_alerts_read_only_known_metrics() -> None:
    board = dashboard(_spec())
    exprs = [expr for _, expr in expressions(board)]
    assert any("kn_revision_request_concurrency" in e for e in exprs)
    assert all(not unknown_metrics(e) for e in exprs)


# Rules, each failing under its field with the numbers and the fix.


def test_min_replicas_zero_is_refused_for_an_engine_that_does_not_scale_to_zero() -> None:
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(
            _with(engine="vllm", scaling={"min_replicas": 0, "max_replicas": 2, "autoscale": True})
        )
    message = _problems(raised.value)["scaling.min_replicas"]
    assert "does not scale to zero" in message
    assert "engine: rayservice or kserve" in message


def test_kserve_options_are_refused_for_an_engine_without_options() -> None:
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(
            _with(
                engine="rayservice",
                weights={"prefix": "models/mistral-7b/"},
                scaling={"min_replicas": 0, "max_replicas": 2},
                options={"retention_seconds": 60},
            )
        )
    assert _problems(raised.value)["options"] == (
        "engine rayservice has no options; remove options (engines with options: kserve, triton, "
        "dynamo)"
    )


def test_inferentia2_is_refused_with_the_reason() -> None:
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(
            _with(
                instance_type="inf2.48xlarge",
                tensor_parallel_size=8,
                weights={"prefix": "models/mistral-7b/"},
                neuron={"compiled_artifacts_prefix": "neuron-artifacts/"},
                limits={"max_model_len": 4096, "max_num_seqs": 16},
            )
        )
    message = _problems(raised.value)["engine"]
    assert "runs only on a GPU instance, not inf2.48xlarge" in message
    assert "progress deadline" in message
    assert "engine: vllm or rayservice" in message


def test_scale_to_zero_bounds() -> None:
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(
            _with(scaling={"min_replicas": 0, "max_replicas": 2}, options={"initial_replicas": 3})
        )
    assert (
        "must lie within min_replicas (0) and max_replicas (2)"
        in (_problems(raised.value)["options.initial_replicas"])
    )
    zero = ModelDeploymentSpec.model_validate(
        _with(scaling={"min_replicas": 0, "max_replicas": 2}, options={"initial_replicas": 0})
    )
    assert kserve.initial_replicas(zero) == 0
    warm = ModelDeploymentSpec.model_validate(_with(scaling={"min_replicas": 2, "max_replicas": 2}))
    assert kserve.initial_replicas(warm) == 2
    assert idle_timeout_seconds(warm) < rollout_seconds(warm)  # no request waits a cold start


def test_a_70b_cold_start_fails_a_short_deadline_and_passes_the_computed_one() -> None:
    computed = ModelDeploymentSpec.model_validate(G6E_70B)
    rollout = rollout_seconds(computed)
    assert rollout == NODE_AND_IMAGE_SECONDS + model_load_seconds(computed)
    assert kserve.progress_deadline_seconds(computed) == rollout
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate(
            {**G6E_70B, "options": {"progress_deadline_seconds": 600}}
        )
    message = _problems(raised.value)["options.progress_deadline_seconds"]
    assert f"600 s is shorter than a cold start of this deployment ({NODE_AND_IMAGE_SECONDS} s" in (
        message
    )
    assert f"= {rollout} s" in message
    assert f"set at least {rollout}, or remove it to use {rollout}" in message
    exact = {"progress_deadline_seconds": rollout}
    assert ModelDeploymentSpec.model_validate({**G6E_70B, "options": exact})


def test_a_request_timeout_shorter_than_a_cold_first_request_fails() -> None:
    spec = ModelDeploymentSpec.model_validate(G6E_70B)
    needed = idle_timeout_seconds(spec)
    short = {"request_timeout_seconds": 900}
    with pytest.raises(ValidationError) as raised:
        ModelDeploymentSpec.model_validate({**G6E_70B, "options": short})
    message = _problems(raised.value)["options.request_timeout_seconds"]
    assert "900 s does not cover a cold start" in message
    assert f"set at least {needed}" in message


def test_the_example_is_a_path_under_the_repository() -> None:
    assert Path(EXAMPLE).is_file()


def _beside_the_example(name: str) -> dict[str, Any]:
    """The example platform, its KServe deployment named ``m``, after a standalone vLLM
    deployment ``name``."""
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    (kserve_deployment,) = data["deployments"]
    kserve_deployment["name"] = "m"
    vllm_deployment = {
        "name": name,
        "model": "mistral-7b",
        "instance_type": "g6e.2xlarge",
        "engine": "vllm",
        "weights": {"prefix": f"models/{name}/", "loader": "runai_streamer"},
    }
    data["deployments"] = [vllm_deployment, kserve_deployment]
    data["node_pools"][1]["max_size"] += 2
    return data


@pytest.mark.parametrize("suffix", ["00001", "00042-private"])
def test_a_service_of_a_knative_revision_is_refused_to_another_deployment(suffix: str) -> None:
    name = f"{names.kserve_predictor_name('m')}-{suffix}"
    with pytest.raises(ValidationError) as raised:
        PlatformSpec.model_validate(_beside_the_example(name))
    assert _problems(raised.value) == {
        "deployments.0.name": f"deployment '{name}' (vllm) needs the Service '{name}', which "
        "the controllers of deployment 'm' (deployments.1.name, kserve) make for its "
        "revisions: rename one of them"
    }


def test_a_name_outside_the_revisions_family_is_accepted() -> None:
    # Knative numbers revisions with five digits; anything else is not one of its Services.
    name = f"{names.kserve_predictor_name('m')}-1"
    assert PlatformSpec.model_validate(_beside_the_example(name)).deployment(name)


def test_the_cli_refuses_a_revisions_service_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(_beside_the_example("m-predictor-00001")))
    one_line_error(
        run_cli("plan", "--platform", path, cwd=tmp_path),
        2,
        "deployments.0.name",
        "the controllers of deployment 'm'",
    )


def test_the_predictor_serves_lora_adapters_from_the_mounted_prefix() -> None:
    """KServe's predictor runs vLLM's own server, so it serves adapters as standalone vLLM
    does: the flags, the read-only Mountpoint volume of the adapters prefix (its PV and claim
    in the server chart, the prefix granted to the driver) and the on-demand resolver."""
    adapters = {
        "prefix": "adapters/mistral-7b/",
        "max_loras": 2,
        "preload": ["support-tone"],
        "on_demand": ["sql-writer"],
    }
    data = yaml.safe_load(EXAMPLE.read_text())
    data["deployments"][0]["adapters"] = adapters
    # On-demand adapters need a model path in the pod (docs/lora-adapters.md).
    data["deployments"][0]["weights"] = {"prefix": "models/mistral-7b/"}
    platform = PlatformSpec.model_validate(data)
    (spec,) = platform.deployments
    objects = render_platform(platform, CONTEXT)[spec.name]
    isvc = one(objects, "InferenceService")
    assert schema_errors(crd_validator(INFERENCESERVICE_CRD, "v1beta1"), isvc) == []
    predictor = isvc["spec"]["predictor"]
    (container,) = predictor["containers"]
    args = container["args"]
    assert args[args.index("--enable-lora") : args.index("--enable-lora") + 8] == [
        "--enable-lora",
        "--max-loras",
        "2",
        "--max-lora-rank",
        "16",
        "--max-cpu-loras",
        "2",
        "--lora-modules",
    ]
    assert "support-tone=/mnt/adapters/support-tone" in args
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"
    assert env["VLLM_LORA_RESOLVER_CACHE_DIR"] == "/mnt/adapters"
    assert {"name": "adapters", "mountPath": "/mnt/adapters", "readOnly": True} in container[
        "volumeMounts"
    ]
    (claim,) = [
        o
        for o in of_kind(objects, "PersistentVolumeClaim")
        if o["metadata"]["name"].endswith("-adapters")
    ]
    (volume,) = [
        o
        for o in of_kind(objects, "PersistentVolume")
        if o["metadata"]["name"].endswith("-adapters")
    ]
    read_only_claim = {"claimName": claim["metadata"]["name"], "readOnly": True}
    assert {"name": "adapters", "persistentVolumeClaim": read_only_claim} in predictor["volumes"]
    assert "prefix adapters/mistral-7b/" in volume["spec"]["mountOptions"]
    for obj in (claim, volume):
        assert kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
