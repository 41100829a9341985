"""``engine: triton``: the typed repository, its generated files checked by Triton's and vLLM's
own schemas at the pinned releases, the rendered objects, and bad input with field and fix."""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes_validate
import pytest
import yaml
from google.protobuf import text_format
from grpc_tools import protoc
from pydantic import ValidationError

from eks_inference.charts.render import render_platform
from eks_inference.charts.vllm_server import vllm_engine_args
from eks_inference.engines.triton.engine import (
    LAUNCHER_COMMAND,
    REPOSITORY_DIGEST_ANNOTATION,
    repository_config_map_name,
)
from eks_inference.engines.triton.options import triton_options
from eks_inference.engines.triton.repository import REPOSITORY_PATH
from eks_inference.metrics import metric_names, unknown_metrics
from eks_inference.observability.dashboards import dashboard, expressions
from eks_inference.serve.triton_openai import READY_PATH
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.objects import crd_validator, is_custom_resource, of_kind, one, schema_errors
from tests.helpers.observed import SCALEDOBJECT_CRD
from tests.helpers.rendered import CONTEXT
from tests.helpers.vllm_args import engine_args_table

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "triton-canary.yaml"
UPSTREAM = ROOT / "tests" / "upstream"
MODEL_CONFIG_PROTO = UPSTREAM / "triton-r25.11-model_config.proto"
ENGINE_ARGS = UPSTREAM / "vllm-v0.11.0-engine-args.txt"


def example_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return data


def triton_data(data: dict[str, Any]) -> dict[str, Any]:
    deployment: dict[str, Any] = next(d for d in data["deployments"] if d["engine"] == "triton")
    return deployment


@cache
def example() -> PlatformSpec:
    return PlatformSpec.model_validate(example_data())


@cache
def rendered() -> dict[str, list[dict[str, Any]]]:
    return render_platform(example(), CONTEXT)


def repository(name: str = "qwen-triton") -> dict[str, str]:
    config_maps = of_kind(rendered()[name], "ConfigMap")
    spec = example().deployment(name)
    found = next(
        c for c in config_maps if c["metadata"]["name"] == repository_config_map_name(spec)
    )
    data: dict[str, str] = found["data"]
    return data


@cache
def model_config_module(tmp: str) -> ModuleType:
    """Triton's model_config.proto at r25.11, compiled with protoc into a Python module."""
    out = Path(tmp)
    # Under the file name Triton builds it with, so the module is model_config_pb2.
    (out / "model_config.proto").write_text(MODEL_CONFIG_PROTO.read_text())
    status = protoc.main(
        ["protoc", f"--proto_path={out}", f"--python_out={out}", str(out / "model_config.proto")]
    )
    assert status == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("model_config_pb2")
    finally:
        sys.path.remove(str(out))


@pytest.fixture(scope="module")
def model_config(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return model_config_module(str(tmp_path_factory.mktemp("proto")))


def test_every_object_validates_strictly() -> None:
    for objects in rendered().values():
        for obj in objects:
            if not is_custom_resource(obj):
                kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_every_config_pbtxt_parses_as_a_model_config(model_config: ModuleType) -> None:
    options = triton_options(example().deployment("qwen-triton"))
    configs = {k: v for k, v in repository().items() if k.endswith(".config.pbtxt")}
    assert sorted(configs) == sorted(f"{m.name}.config.pbtxt" for m in options.models)
    for key, text in configs.items():
        message = text_format.Parse(text, model_config.ModelConfig())
        model = next(m for m in options.models if key == f"{m.name}.config.pbtxt")
        assert message.name == model.name
        assert message.backend == model.backend
        assert list(message.version_policy.specific.versions) == list(model.versions)
        if model.is_llm:
            assert message.model_transaction_policy.decoupled
            assert message.instance_group[0].kind == model_config.ModelInstanceGroup.KIND_MODEL
            assert message.parameters["REPORT_CUSTOM_METRICS"].string_value == "true"
        else:
            assert message.max_batch_size == model.max_batch_size
            assert [i.name for i in message.input] == [t.name for t in model.inputs]
            assert [list(o.dims) for o in message.output] == [list(t.dims) for t in model.outputs]
            assert message.default_model_filename == "model.onnx"
            assert list(message.dynamic_batching.preferred_batch_size) == [8, 16]
            kinds = [g.kind for g in message.instance_group]
            assert kinds == [model_config.ModelInstanceGroup.KIND_GPU]


def _accepts(annotation: ast.expr, value: Any, aliases: dict[str, str]) -> bool:
    """Whether ``value`` (from JSON) is of the type ``annotation`` names, as vLLM declares it."""
    if isinstance(annotation, ast.Name):
        name = annotation.id
        if name in aliases:
            return _accepts(ast.parse(aliases[name], mode="eval").body, value, aliases)
        simple = {"int": int, "float": (int, float), "str": str, "bool": bool, "dict": dict}
        if name not in simple:
            pytest.fail(f"the engine-args check cannot read the type {name}")
        if name in {"int", "float"} and isinstance(value, bool):
            return False
        return isinstance(value, simple[name])
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return value is None
    if isinstance(annotation, ast.Subscript):
        head = ast.unparse(annotation.value)
        inner = annotation.slice
        items = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
        if head == "Optional":
            return value is None or _accepts(items[0], value, aliases)
        if head == "Union":
            return any(_accepts(item, value, aliases) for item in items)
        if head == "Literal":
            allowed = []
            for item in items:
                if isinstance(item, ast.Name):
                    allowed.extend(ast.literal_eval(aliases[item.id].removeprefix("Literal")))
                else:
                    allowed.append(ast.literal_eval(item))
            return value in allowed
        if head in {"dict", "Dict"}:
            return isinstance(value, dict)
        if head in {"list", "List"}:
            return isinstance(value, list)
    pytest.fail(f"the engine-args check cannot read {ast.unparse(annotation)}")


def test_model_json_passes_vllm_engine_args_of_the_pinned_release() -> None:
    """Triton's vLLM backend builds AsyncEngineArgs(**model.json): every key must be a field
    of vLLM 0.11.0's EngineArgs with a value of its declared type."""
    fields, aliases = engine_args_table(ENGINE_ARGS)
    spec = example().deployment("qwen-triton")
    files = {k: json.loads(v) for k, v in repository().items() if k.endswith(".model.json")}
    assert list(files) == ["qwen.1.model.json"]
    engine = files["qwen.1.model.json"]
    assert engine == vllm_engine_args(spec, bucket_name=CONTEXT.bucket_name)
    assert engine["model"] == "/mnt/model"
    for key, value in engine.items():
        assert key in fields, f"{key} is not an engine argument of vLLM 0.11.0"
        annotation = ast.parse(fields[key], mode="eval").body
        assert _accepts(annotation, value, aliases), (key, value, fields[key])


def test_a_block_size_the_triton_vllm_refuses_fails_validation() -> None:
    fields, aliases = engine_args_table(ENGINE_ARGS)
    annotation = ast.parse(fields["block_size"], mode="eval").body
    assert not _accepts(annotation, 256, aliases)
    data = example_data()
    triton_data(data)["limits"]["block_size"] = 256
    with pytest.raises(ValidationError, match=r"limits\.block_size\n.*up to 128"):
        PlatformSpec.model_validate(data)


def test_the_pod_assembles_the_repository_from_mounts() -> None:
    objects = rendered()["qwen-triton"]
    deployment = one(objects, "Deployment")
    template = deployment["spec"]["template"]
    container = template["spec"]["containers"][0]
    assert container["command"] == list(LAUNCHER_COMMAND)
    assert container["image"].endswith("@sha256:" + container["image"].split("@sha256:")[1])
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[f"{REPOSITORY_PATH}/qwen/config.pbtxt"]["subPath"] == "qwen.config.pbtxt"
    assert mounts[f"{REPOSITORY_PATH}/qwen/1/model.json"]["subPath"] == "qwen.1.model.json"
    assert mounts[f"{REPOSITORY_PATH}/embed/1"]["subPath"] == "embed/1"
    assert all(m.get("readOnly") for p, m in mounts.items() if p.startswith(f"{REPOSITORY_PATH}/"))
    claim = next(
        v
        for v in template["spec"]["volumes"]
        if v["name"] == mounts[f"{REPOSITORY_PATH}/embed/1"]["name"]
    )
    volume = next(
        o
        for o in of_kind(objects, "PersistentVolume")
        if o["spec"]["claimRef"]["name"] == claim["persistentVolumeClaim"]["claimName"]
    )
    assert "prefix triton/qwen-triton/" in volume["spec"]["mountOptions"]
    assert len(template["metadata"]["annotations"][REPOSITORY_DIGEST_ANNOTATION]) == 64
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == READY_PATH
    # The key comes from the Secret, never from an argument.
    assert "VLLM_API_KEY" in {e["name"] for e in container["env"] if "valueFrom" in e}
    assert not any("key" in a.lower() and a != "--require-api-key" for a in container["args"])


def test_the_ingress_forwards_the_openai_and_v2_routes_only() -> None:
    ingress = one(rendered()["qwen-triton"], "Ingress")
    paths = [p["path"] for p in ingress["spec"]["rules"][0]["http"]["paths"]]
    assert paths == ["/qwen-triton/v1", "/qwen-triton/v2/models"]
    annotations = ingress["metadata"]["annotations"]
    assert annotations["alb.ingress.kubernetes.io/healthcheck-path"] == READY_PATH


def _problems(data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as error:
        PlatformSpec.model_validate(data)
    return str(error.value)


def test_a_model_with_no_version_names_the_field_and_the_fix() -> None:
    data = example_data()
    del triton_data(data)["options"]["models"][1]["versions"]
    message = _problems(data)
    assert re.search(
        r"deployments\.0\.options\.models\.1\.versions\n.*has no version.*versions: \[1\]", message
    )


def test_a_backend_the_image_does_not_ship_names_the_field_and_the_fix() -> None:
    data = example_data()
    del triton_data(data)["options"]["image"]
    message = _problems(data)
    assert re.search(
        r"deployments\.0\.options\.models\.1\.backend\n.*backend onnxruntime is not in "
        r"nvcr\.io/nvidia/tritonserver:25\.11-vllm-python-py3.*name it in options\.image",
        message,
    )


def test_models_that_do_not_fit_the_gpu_together_name_the_field_and_the_fix() -> None:
    data = example_data()
    triton_data(data)["options"]["models"][1]["gpu_memory_mib"] = 12_288
    message = _problems(data)
    assert re.search(
        r"deployments\.0\.options\.models\n.*framework models take 12288 MiB on each GPU.*"
        r"lower limits\.gpu_memory_utilization to 0\.\d+",
        message,
    )


def test_triton_options_on_another_engine_are_refused() -> None:
    data = example_data()
    data["deployments"][1]["options"] = triton_data(data)["options"]
    message = _problems(data)
    assert re.search(r"deployments\.1\.options\n.*engine vllm has no options; remove", message)


def test_an_engine_triton_deployment_needs_its_repository() -> None:
    data = example_data()
    del triton_data(data)["options"]
    assert re.search(
        r"deployments\.0\.options\n.*engine triton needs its options: add options with models",
        _problems(data),
    )


def test_monitors_alerts_and_dashboard_read_tritons_metrics() -> None:
    crds = ROOT / "tests" / "crds"
    validators = {
        "PodMonitor": crd_validator(crds / "monitoring.coreos.com_podmonitors.yaml", "v1"),
        "PrometheusRule": crd_validator(crds / "monitoring.coreos.com_prometheusrules.yaml", "v1"),
    }
    objects = rendered()["qwen-triton"]
    for obj in objects:
        if is_custom_resource(obj):
            assert not schema_errors(validators[obj["kind"]], obj), obj["kind"]
    rules = one(objects, "PrometheusRule")["spec"]["groups"][0]["rules"]
    alerts = {rule["alert"]: rule["expr"] for rule in rules}
    assert {"TritonRequestsFailing", "TritonQueueSlow"} <= set(alerts)
    assert "InferenceKVCacheNearlyFull" not in alerts  # the vLLM backend exports no KV gauge
    assert "nv_inference_request_failure{" in alerts["TritonRequestsFailing"]
    spec = example().deployment("qwen-triton")
    board = dashboard(spec)
    titles = {panel["title"] for panel in board["panels"]}
    assert {"Triton requests by model", "Triton queue and compute time", "Triton GPU use"} <= titles
    read = {name for _, expr in expressions(board) for name in metric_names(expr)}
    assert {"nv_inference_queue_duration_us", "vllm:time_per_output_token_seconds_bucket"} <= read
    for _, expr in expressions(board):
        assert not unknown_metrics(expr), expr


def test_triton_scales_on_its_pending_requests_with_keda() -> None:
    data = example_data()
    triton = triton_data(data)
    triton["scaling"] = {"min_replicas": 1, "max_replicas": 3, "autoscale": True}
    data["node_pools"] = [
        {**pool, "max_size": pool["max_size"] + 2} if pool["name"] != "system" else pool
        for pool in data["node_pools"]
    ]
    platform = PlatformSpec.model_validate(data)
    objects = render_platform(platform, CONTEXT)[triton["name"]]
    # KEDA owns the replica count: the Deployment leaves it out.
    assert "replicas" not in one(objects, "Deployment")["spec"]
    scaled = one(objects, "ScaledObject")
    assert not schema_errors(crd_validator(SCALEDOBJECT_CRD, "v1alpha1"), scaled)
    assert scaled["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": triton["name"],
    }
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (1, 3)
    # Its queue is the one trigger: the vLLM backend exports no KV-cache gauge to add.
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["name"] == "queue-depth"
    assert "nv_inference_pending_request_count{" in trigger["metadata"]["query"]
    assert not unknown_metrics(trigger["metadata"]["query"])
    # Without autoscale a range stays refused, naming the fix.
    triton["scaling"] = {"min_replicas": 1, "max_replicas": 3}
    message = _problems(data)
    assert "runs a fixed number of replicas" in message
    assert "autoscale: true to scale on queue depth with KEDA" in message
