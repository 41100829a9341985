"""NVIDIA Dynamo (``engine: dynamo``): the example platform's graphs against the pinned
DynamoGraphDeployment schema and the release's own graphs, every worker and frontend argument
list against the release's recorded parsers, the rules' refusals, the proxy's key check and
the graph's flows."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from eks_inference import names
from eks_inference.charts.render import render_platform
from eks_inference.charts.serving import engine_needs, serving_engine
from eks_inference.engines.dynamo import graph as dgd
from eks_inference.engines.dynamo.options import graph_of
from eks_inference.engines.dynamo.rules import kv_transport
from eks_inference.metrics import unknown_metrics
from eks_inference.observability.observed import observed_engine
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import (
    DYNAMO_RUNTIME_IMAGE,
    DYNAMO_VERSION,
    DYNAMO_VLLM_VERSION,
    KUBERNETES_VERSION,
)
from tests.helpers.checks import found
from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.objects import (
    component_pod_template,
    crd_validator,
    is_custom_resource,
    of_kind,
    one,
    schema_errors,
)
from tests.helpers.platforms import CRDS, REPO, UPSTREAM
from tests.helpers.rendered import CONTEXT
from tests.helpers.vllm_args import ServeOption, serve_args_problems, split_known, table_rows

EXAMPLE = REPO / "examples" / "dynamo.yaml"
DGD_CRD = CRDS / "nvidia.com_dynamographdeployments.yaml"
PODMONITOR_CRD = CRDS / "monitoring.coreos.com_podmonitors.yaml"
PROMETHEUSRULE_CRD = CRDS / "monitoring.coreos.com_prometheusrules.yaml"
WORKER_OPTIONS = UPSTREAM / f"dynamo-{DYNAMO_VERSION}-vllm-worker-options.txt"
FRONTEND_OPTIONS = UPSTREAM / f"dynamo-{DYNAMO_VERSION}-frontend-options.txt"
TEMPLATES = {
    "agg": UPSTREAM / f"dynamo-{DYNAMO_VERSION}-vllm-agg.yaml",
    "disagg": UPSTREAM / f"dynamo-{DYNAMO_VERSION}-vllm-disagg.yaml",
}
# Fields of the release's own graphs the rendered ones leave out, each for a reason:
# the Hugging Face token Secret (weights come from the model bucket, never the Hub), the
# image's example directory as working directory (the worker runs a module), and a bare
# ephemeral-storage request (the pod's scratch volumes are bounded emptyDirs instead).
OMITTED = frozenset(
    {
        "podTemplate.spec.containers.envFrom",
        "podTemplate.spec.containers.envFrom.secretRef",
        "podTemplate.spec.containers.envFrom.secretRef.name",
        "podTemplate.spec.containers.workingDir",
        "podTemplate.spec.containers.resources.requests.ephemeral-storage",
    }
)


@cache
def _platform() -> PlatformSpec:
    return PlatformSpec.from_yaml(EXAMPLE)


@cache
def _objects() -> dict[str, list[dict[str, Any]]]:
    return render_platform(_platform(), CONTEXT)


def _spec(name: str) -> ModelDeploymentSpec:
    (spec,) = [s for s in _platform().deployments if s.name == name]
    return spec


def _graph(name: str) -> dict[str, Any]:
    return one(_objects()[name], "DynamoGraphDeployment")


def _components(name: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _graph(name)["spec"]["components"]}


def _main(component: dict[str, Any]) -> dict[str, Any]:
    (container,) = component["podTemplate"]["spec"]["containers"]
    assert container["name"] == dgd.MAIN_CONTAINER
    return dict(container)


def test_the_example_serves_one_graph_disaggregated_and_one_aggregated() -> None:
    disagg, agg = _spec("llama-70b-disagg"), _spec("mistral-7b-kv")
    split = graph_of(disagg)
    assert split is not None
    assert (split.prefill.tensor_parallel_size, split.decode.tensor_parallel_size) == (4, 4)
    assert graph_of(agg) is None
    assert kv_transport(disagg) is not None
    assert kv_transport(agg) is None
    assert set(_components("llama-70b-disagg")) == {"frontend", "prefill", "decode"}
    assert set(_components("mistral-7b-kv")) == {"frontend", "worker"}
    for name in ("llama-70b-disagg", "mistral-7b-kv"):
        assert engine_needs(_spec(name)).custom_resources == (names.DYNAMOGRAPHDEPLOYMENT_CRD,)


def test_every_object_validates_strictly_against_its_schema() -> None:
    validators = {
        "DynamoGraphDeployment": crd_validator(DGD_CRD, "v1beta1"),
        "PodMonitor": crd_validator(PODMONITOR_CRD, "v1"),
        "PrometheusRule": crd_validator(PROMETHEUSRULE_CRD, "v1"),
    }
    checked = 0
    for obj in [o for objects in _objects().values() for o in objects]:
        if obj["kind"] in validators:
            assert schema_errors(validators[obj["kind"]], obj) == [], obj["metadata"]["name"]
            checked += obj["kind"] == "DynamoGraphDeployment"
        elif not is_custom_resource(obj):
            assert kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    assert checked == 2


def test_every_components_pod_template_validates_strictly_against_kubernetes() -> None:
    """Each component's ``podTemplate`` as Kubernetes 1.35's PodTemplateSpec, beside the CRD's
    own copy of that schema."""
    for name, component in found(_rendered_components()):
        template = component_pod_template(name, component)
        assert kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)


def test_the_graph_has_the_object_shape_of_the_releases_own_graphs() -> None:
    """Every field path of the release's own graph components, of the same type, is in the
    rendered graph's (but those :data:`OMITTED` says why), and the graph itself is typed as
    theirs: ``nvidia.com/v1beta1``, ``spec.components[]``."""
    for template, deployment in (("agg", "mistral-7b-kv"), ("disagg", "llama-70b-disagg")):
        upstream = yaml.safe_load(TEMPLATES[template].read_text())
        rendered = _graph(deployment)
        assert (rendered["apiVersion"], rendered["kind"]) == (
            upstream["apiVersion"],
            upstream["kind"],
        )
        ours = {c["type"]: _paths(c) for c in rendered["spec"]["components"]}
        for component in found(upstream["spec"]["components"]):
            missing = _paths(component) - ours[component["type"]] - OMITTED
            assert missing == set(), (template, component["type"])


def _paths(value: Any, prefix: str = "") -> set[str]:
    """The field paths of ``value`` (list items merged under their field's path)."""
    paths: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else key
            paths |= {path, *_paths(item, path)}
    elif isinstance(value, list):
        for item in value:
            paths |= _paths(item, prefix)
    return paths


def test_the_images_are_the_pinned_runtime() -> None:
    for name in ("llama-70b-disagg", "mistral-7b-kv"):
        for component in _components(name).values():
            assert _main(component)["image"] == DYNAMO_RUNTIME_IMAGE
    (proxy,) = [
        d for d in of_kind(_objects()["mistral-7b-kv"], "Deployment") if d["metadata"]["name"]
    ]
    assert proxy["spec"]["template"]["spec"]["containers"][0]["image"] == DYNAMO_RUNTIME_IMAGE


# -- the recorded parsers --------------------------------------------------------------------


def _worker_options() -> tuple[dict[str, ServeOption], dict[str, ServeOption]]:
    dynamo: dict[str, ServeOption] = {}
    vllm: dict[str, ServeOption] = {}
    for parser, *row in table_rows(WORKER_OPTIONS):
        (dynamo if parser == "dynamo" else vllm)[row[0]] = ServeOption(*row)
    return dynamo, vllm


def test_the_worker_table_is_of_the_release_and_its_vllm() -> None:
    header = WORKER_OPTIONS.read_text()
    assert f"ai-dynamo=={DYNAMO_VERSION}" in header
    assert f"vllm=={DYNAMO_VLLM_VERSION}" in header
    dynamo, vllm = _worker_options()
    assert json_choices(dynamo["--disaggregation-mode"]) >= {"prefill", "decode"}
    assert vllm["--kv-transfer-config"].kind == "json"
    frontend = {row[0]: ServeOption(*row) for row in table_rows(FRONTEND_OPTIONS)}
    assert json_choices(frontend["--router-mode"]) >= {"kv", "round-robin"}


def json_choices(option: ServeOption) -> set[str]:
    assert option.kind == "choices"
    return set(yaml.safe_load(option.detail))


def _rendered_components() -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, component)
        for name in ("llama-70b-disagg", "mistral-7b-kv")
        for component in _components(name).values()
    ]


def test_every_worker_argument_list_is_accepted_by_the_release() -> None:
    """Dynamo's groups parse their options first (``parse_known_args``); vLLM's parser takes
    the rest: each list splits into the two, and each part parses."""
    dynamo, vllm = _worker_options()
    workers = found(
        c for _, c in _rendered_components() if c["type"] in ("worker", "prefill", "decode")
    )
    for component in workers:
        main = _main(component)
        assert main["command"] == list(dgd.WORKER_COMMAND)
        args = main["args"]
        ours, engine = split_known(args, dynamo)
        assert serve_args_problems(ours, dynamo, positional=False) == [], component["name"]
        assert serve_args_problems(engine, vllm, positional=False) == [], component["name"]
        assert "--model" in engine


def test_every_frontend_argument_list_is_accepted_by_the_release() -> None:
    frontend = {row[0]: ServeOption(*row) for row in table_rows(FRONTEND_OPTIONS)}
    fronts = found(c for _, c in _rendered_components() if c["type"] == "frontend")
    for component in fronts:
        main = _main(component)
        assert main["command"] == list(dgd.FRONTEND_COMMAND)
        args = main["args"]
        assert args[:2] == list(dgd.FRONTEND_MODULE_ARGS)
        assert serve_args_problems(args[2:], frontend, positional=False) == []
        assert args[args.index("--router-mode") + 1] == "kv"


def test_disaggregated_workers_hand_the_kv_cache_over_nixl() -> None:
    components = _components("llama-70b-disagg")
    for role in ("prefill", "decode"):
        args = _main(components[role])["args"]
        assert args[args.index("--disaggregation-mode") + 1] == role
        assert "NixlConnector" in args[args.index("--kv-transfer-config") + 1]
        assert args[args.index("--tensor-parallel-size") + 1] == "4"
        assert _main(components[role])["resources"]["limits"]["nvidia.com/gpu"] == "4"
        affinity = components[role]["podTemplate"]["spec"]["affinity"]["podAffinity"]
        (preferred,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
        term = preferred["podAffinityTerm"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"][names.COMPONENT_LABEL] == (dgd.WORKER_COMPONENT)
    assert "--kv-events-config" in _main(components["prefill"])["args"]
    assert "--kv-events-config" not in _main(components["decode"])["args"]


# -- the rules -------------------------------------------------------------------------------


def _platform_with(tmp_path: Path, change: dict[str, Any], index: int = 0) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["deployments"][index] = {**copy.deepcopy(data["deployments"][index]), **change}
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_dynamo_on_inferentia_is_refused_with_the_reason(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["node_pools"].append(
        {"name": "inf2", "instance_types": ["inf2.48xlarge"], "min_size": 0, "max_size": 1}
    )
    data["deployments"][1]["instance_type"] = "inf2.48xlarge"
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    one_line_error(
        run_cli("plan", "--platform", path, cwd=tmp_path),
        2,
        "deployments.1.engine",
        "built for CUDA GPUs only",
        "engine: vllm or rayservice",
    )


def test_a_prefill_degree_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    options = {
        "mode": "disaggregated",
        "prefill": {"replicas": 1, "tensor_parallel_size": 2},
        "decode": {"replicas": 1, "tensor_parallel_size": 4},
    }
    one_line_error(
        run_cli("plan", "--platform", _platform_with(tmp_path, {"options": options}), cwd=tmp_path),
        2,
        "deployments.0.options.prefill.tensor_parallel_size",
        "does not fit 2 GPUs of g6e.48xlarge",
        "use tensor_parallel_size 4",
    )


def test_disaggregation_across_nodes_without_a_transport_is_refused(tmp_path: Path) -> None:
    # One L40S per g6e.2xlarge, no EFA: a prefill and a decode worker are two nodes apart.
    change = {"options": {"mode": "disaggregated", "router": "kv"}}
    one_line_error(
        run_cli("plan", "--platform", _platform_with(tmp_path, change, 1), cwd=tmp_path),
        2,
        "deployments.1.options.prefill.replicas",
        "needs 2 GPUs, more than one g6e.2xlarge (1)",
        "without a transport: it has no EFA",
        "keep prefill and decode within 1 GPUs",
    )


def test_prefill_and_decode_of_different_models_are_refused(tmp_path: Path) -> None:
    options = {
        "mode": "disaggregated",
        "prefill": {"replicas": 1, "tensor_parallel_size": 4, "model": "llama-3-8b"},
        "decode": {"replicas": 1, "tensor_parallel_size": 4},
    }
    one_line_error(
        run_cli("plan", "--platform", _platform_with(tmp_path, {"options": options}), cwd=tmp_path),
        2,
        "deployments.0.options.prefill.model",
        "same weights, dtype (bfloat16) and KV block size (16)",
        "remove options.prefill.model",
    )


def test_the_split_is_given_once(tmp_path: Path) -> None:
    change = {"disaggregation": {"prefill": {"tensor_parallel_size": 4}}}
    one_line_error(
        run_cli("plan", "--platform", _platform_with(tmp_path, change), cwd=tmp_path),
        2,
        "deployments.0.disaggregation",
        "given twice",
    )


def test_the_engine_neutral_split_field_is_dynamos_split_too() -> None:
    data = yaml.safe_load(EXAMPLE.read_text())["deployments"][0]
    data["options"] = {"router": "round_robin"}
    data["disaggregation"] = {
        "prefill": {"replicas": 1, "tensor_parallel_size": 4},
        "decode": {"replicas": 1, "tensor_parallel_size": 4},
    }
    spec = ModelDeploymentSpec.model_validate(data)
    split = graph_of(spec)
    assert split is not None
    assert split.accelerators == 8
    assert "--kv-events-config" not in dgd.worker_args(
        dgd.at_degree(spec, split.prefill), dgd.PREFILL, bucket_name="b"
    )


# -- the key, the flows, the signals -----------------------------------------------------------


def test_the_load_balancer_reaches_the_proxy_and_only_the_proxy_reaches_the_frontend() -> None:
    spec = _spec("llama-70b-disagg")
    objects = _objects()[spec.name]
    services = {s["metadata"]["name"]: s for s in of_kind(objects, "Service")}
    backend = serving_engine(spec).backend(spec)
    assert services[backend.service]["spec"]["selector"][names.COMPONENT_LABEL] == (
        dgd.PROXY_COMPONENT
    )
    (proxy,) = of_kind(objects, "Deployment")
    container = proxy["spec"]["template"]["spec"]["containers"][0]
    assert "--no-key" not in container["args"]
    assert {e["name"] for e in container["env"] if "valueFrom" in e} == {"VLLM_API_KEY"}
    policies = {p["metadata"]["name"]: p for p in of_kind(objects, "NetworkPolicy")}
    front = policies[f"{spec.name}-dynamo-frontend"]["spec"]
    assert front["podSelector"]["matchLabels"][names.COMPONENT_LABEL] == dgd.FRONTEND_COMPONENT
    (ingress,) = front["ingress"]
    (source,) = ingress["from"]
    assert source["podSelector"]["matchLabels"][names.COMPONENT_LABEL] == dgd.PROXY_COMPONENT
    serving = policies[f"{spec.name}-serving"]["spec"]["podSelector"]
    assert serving["matchExpressions"][0]["values"] == [dgd.PROXY_COMPONENT]


def test_the_signals_name_only_metrics_of_the_pinned_release() -> None:
    for name in ("llama-70b-disagg", "mistral-7b-kv"):
        spec = _spec(name)
        engine = observed_engine(spec)
        exprs = [a.expr for a in engine.own_alerts(spec)]
        exprs += [q for p in engine.own_panels(spec) for q, _ in p.series]
        assert found(exprs)
        for expr in exprs:
            assert unknown_metrics(expr) == set(), expr
    spec = _spec("llama-70b-disagg")
    alerts = observed_engine(spec).own_alerts(spec)
    assert [a.name for a in alerts] == ["DynamoKvTransferSlow"]


@pytest.mark.parametrize("router", ["kv", "round_robin"])
def test_the_router_is_the_options(router: str) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())["deployments"][1]
    data["options"] = {"router": router}
    spec = ModelDeploymentSpec.model_validate(data)
    args = dgd.frontend_args(spec)
    assert (
        args[args.index("--router-mode") + 1] == {"kv": "kv", "round_robin": "round-robin"}[router]
    )


def test_plan_prints_the_split_beside_the_aggregated_alternative(tmp_path: Path) -> None:
    result = run_cli("plan", "--platform", EXAMPLE, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plans = {d["name"]: d for d in json.loads(result.stdout)["deployments"]}
    assert plans["mistral-7b-kv"]["split"] is None
    split = plans["llama-70b-disagg"]["split"]
    assert split["groups"] == [["prefill", 1, 4], ["decode", 1, 4]]
    assert (split["accelerators"], split["nodes"]) == (8, 1)
    # One g6e.48xlarge either way: the split uses its 8 GPUs, aggregated 1 x TP 4 half.
    assert split["price_per_hour"] == split["aggregated_price_per_hour"] > 0
    assert split["aggregated_accelerators"] == 4
    assert split["transport"] == "one node, PCIe (NIXL)"


def test_the_runai_streamer_is_refused_for_a_graph(tmp_path: Path) -> None:
    """The graph's pods keep the operator's ServiceAccount (its discovery RBAC): no Pod
    Identity of theirs could let the streamer read the bucket."""
    weights = yaml.safe_load(EXAMPLE.read_text())["deployments"][1]["weights"]
    path = _platform_with(tmp_path, {"weights": {**weights, "loader": "runai_streamer"}}, 1)
    one_line_error(
        run_cli("plan", "--platform", path, cwd=tmp_path),
        2,
        "deployments.1.weights.loader",
        "runai_streamer works only for engine: vllm",
        "use loader: mountpoint here",
    )
