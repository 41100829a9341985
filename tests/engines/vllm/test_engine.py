"""Standalone vLLM: flags, weights loading, Neuron settings, probes and the cdk8s-plus overrides."""

from __future__ import annotations

import json

from eks_inference import names
from eks_inference.charts.model_server import (
    ARTIFACTS_MOUNT_PATH,
    MODEL_MOUNT_PATH,
    SCRATCH_COMPILED_ARTIFACTS_PATH,
)
from eks_inference.charts.shipped import (
    API_KEY_AUTH_MODULE,
    CODE_DIGEST_ANNOTATION,
    SHIPPED_PATH,
    VLLM_API_KEY_MIDDLEWARE,
    code_digest,
    module_source,
)
from eks_inference.charts.vllm_server import REMOVED_VLLM_FLAGS, vllm_server_args
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.startup_budget import model_load_seconds
from eks_inference.versions import LMCACHE_VLLM_IMAGE, NEURON_VLLM_IMAGE, VLLM_GPU_IMAGE
from tests.helpers.checks import found
from tests.helpers.objects import PodTemplate, of_kind, one, pod_templates, serving_objects
from tests.helpers.rendered import CONTEXT, Rendered


def _vllm_pods(rendered: Rendered) -> list[PodTemplate]:
    return found(t for t in pod_templates(rendered.platform, rendered.objects) if t.role == "vllm")


def _flags(args: list[str]) -> dict[str, str | None]:
    """``--flag value`` pairs; a flag followed by another flag has no value."""
    flags: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            following = args[i + 1] if i + 1 < len(args) else None
            flags[arg] = None if following is None or following.startswith("--") else following
    return flags


def test_flags_come_from_the_spec(rendered: Rendered) -> None:
    for pod in _vllm_pods(rendered):
        spec = pod.deployment
        flags = _flags(pod.server["args"])
        assert flags["--served-model-name"] == spec.model.id
        assert flags["--tensor-parallel-size"] == str(spec.tensor_parallel_size)
        assert flags["--max-model-len"] == str(spec.limits.max_model_len)
        assert flags["--max-num-seqs"] == str(spec.limits.max_num_seqs)
        assert flags["--dtype"] == spec.model.architecture.dtype
        assert flags["--port"] == "8000"
        assert flags["--host"] == "0.0.0.0"
        assert not set(flags) & REMOVED_VLLM_FLAGS
        assert "--quantization" not in flags
        assert pod.server["command"] == ["vllm", "serve"]
        assert "--model" not in flags


def test_gpu_flags(rendered: Rendered) -> None:
    gpu = [p for p in _vllm_pods(rendered) if not p.deployment.on_neuron]
    for pod in found(gpu):
        flags = _flags(pod.server["args"])
        limits = pod.deployment.limits
        assert flags["--block-size"] == str(limits.block_size)
        assert flags["--gpu-memory-utilization"] == str(limits.gpu_memory_utilization)
        assert "--additional-config" not in flags
        lmcache = pod.deployment.kv_cache is not None
        assert pod.server["image"] == (LMCACHE_VLLM_IMAGE if lmcache else VLLM_GPU_IMAGE)


def test_neuron_flags_follow_the_plugins_rules(variants: Rendered) -> None:
    """No prefix caching, so the plugin forces block size to max-model-len and the KV cache
    has one block per sequence; settings go in --additional-config."""
    neuron = [p for p in _vllm_pods(variants) if p.deployment.on_neuron]
    assert neuron
    for pod in neuron:
        spec = pod.deployment
        flags = _flags(pod.server["args"])
        assert "--no-enable-prefix-caching" in flags
        assert "--enable-prefix-caching" not in flags
        assert flags["--num-gpu-blocks-override"] == str(spec.limits.max_num_seqs)
        assert "--block-size" not in flags
        assert "--gpu-memory-utilization" not in flags
        additional = json.loads(flags["--additional-config"] or "")
        assert set(additional) == {"override_neuron_config"}
        assert pod.server["image"] == NEURON_VLLM_IMAGE


def test_neuron_buckets_and_overrides(variants: Rendered) -> None:
    pod = next(p for p in _vllm_pods(variants) if p.deployment.name == "llama-neuron-vllm")
    override = json.loads(_flags(pod.server["args"])["--additional-config"] or "")[
        "override_neuron_config"
    ]
    assert override == {
        "enable_bucketing": True,
        "context_encoding_buckets": [128, 1024, 4096],
        "token_generation_buckets": [128, 1024, 4096],
        "fused_qkv": True,
    }


def test_runai_streamer_reads_s3_without_a_volume(reference: Rendered) -> None:
    streamed = [p for p in _vllm_pods(reference) if p.deployment.weights.loader == "runai_streamer"]
    assert streamed
    for pod in streamed:
        spec = pod.deployment
        flags = _flags(pod.server["args"])
        assert pod.server["args"][0] == f"s3://{CONTEXT.bucket_name}/{spec.weights.prefix}"
        assert flags["--load-format"] == "runai_streamer"
        assert json.loads(flags["--model-loader-extra-config"] or "") == {"concurrency": 16}
        assert not [v for v in pod.spec["volumes"] if "persistentVolumeClaim" in v]
        assert not of_kind(reference.objects[spec.name], "PersistentVolumeClaim")
        assert pod.env()["AWS_REGION"] == CONTEXT.region


def test_mountpoint_weights_are_mounted_read_only(variants: Rendered) -> None:
    # The variants platform's GPU vLLM deployment reads its weights through Mountpoint; the
    # reference platform's stream theirs.
    mounted = [p for p in _vllm_pods(variants) if p.deployment.weights.loader == "mountpoint"]
    for pod in found(mounted):
        spec = pod.deployment
        flags = _flags(pod.server["args"])
        assert pod.server["args"][0] == MODEL_MOUNT_PATH
        assert "--load-format" not in flags
        mount = pod.mounts()[MODEL_MOUNT_PATH]
        assert mount["readOnly"] is True
        claim = pod.volume(mount["name"])["persistentVolumeClaim"]
        assert claim["readOnly"] is True
        claims = {
            c["metadata"]["name"]
            for c in of_kind(variants.objects[spec.name], "PersistentVolumeClaim")
        }
        assert claim["claimName"] in claims


def test_neuron_environment_and_artifacts(variants: Rendered) -> None:
    for pod in found(p for p in _vllm_pods(variants) if p.deployment.on_neuron):
        spec = pod.deployment
        env = pod.env()
        assert env["NEURON_RT_NUM_CORES"] == str(spec.tensor_parallel_size)
        prefix = spec.neuron_options.compiled_artifacts_prefix
        assert prefix is not None
        # The artifacts volume mounts exactly the deployment's key (artifact_prefix).
        assert env["NEURON_COMPILED_ARTIFACTS"] == ARTIFACTS_MOUNT_PATH
        assert pod.mounts()[ARTIFACTS_MOUNT_PATH]["readOnly"] is True
    gpu_env = [p.env() for p in _vllm_pods(variants) if not p.deployment.on_neuron]
    assert gpu_env
    assert not any("NEURON_COMPILED_ARTIFACTS" in env for env in gpu_env)
    assert SCRATCH_COMPILED_ARTIFACTS_PATH.startswith("/tmp/")


def test_probes_are_http_health_with_a_startup_budget_for_model_load(rendered: Rendered) -> None:
    for pod in _vllm_pods(rendered):
        server = pod.server
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert server[probe]["httpGet"] == {"path": "/health", "port": 8000, "scheme": "HTTP"}
            assert "tcpSocket" not in server[probe]
        startup = server["startupProbe"]
        budget = startup["periodSeconds"] * startup["failureThreshold"]
        assert budget >= model_load_seconds(pod.deployment)
        minimum = 15 * 60 if pod.deployment.on_neuron else 10 * 60
        assert budget >= minimum


def test_neuron_startup_budget_exceeds_gpu() -> None:
    """Neuron loads take 15-20+ minutes; compiling in the pod adds at least half an hour."""
    base = {"model": "llama-3-8b", "weights": {"prefix": "m/"}, "engine": "vllm"}
    gpu = ModelDeploymentSpec.model_validate({**base, "name": "g", "instance_type": "g6e.2xlarge"})
    neuron = ModelDeploymentSpec.model_validate(
        {
            **base,
            "name": "n",
            "instance_type": "inf2.48xlarge",
            "tensor_parallel_size": 8,
            "neuron": {"compiled_artifacts_prefix": "a/"},
        }
    )
    compiling = ModelDeploymentSpec.model_validate(
        {**neuron.model_dump(), "neuron": {"allow_compile_at_startup": True}}
    )
    assert 10 * 60 <= model_load_seconds(gpu) < 15 * 60
    assert 20 * 60 <= model_load_seconds(neuron) < 30 * 60
    assert model_load_seconds(compiling) >= model_load_seconds(neuron) + 30 * 60


def test_cdk8s_plus_defaults_are_overridden(rendered: Rendered) -> None:
    for pod in _vllm_pods(rendered):
        server = pod.server
        # The images run as root: runAsNonRoot would stop the kubelet from starting them.
        assert pod.spec["securityContext"]["runAsNonRoot"] is False
        assert server["securityContext"]["runAsNonRoot"] is False
        # Read-only root, with writable, bounded HOME and /tmp.
        assert server["securityContext"]["readOnlyRootFilesystem"] is True
        assert server["securityContext"]["allowPrivilegeEscalation"] is False
        env = pod.env()
        for path in (env["HOME"], "/tmp"):
            volume = pod.volume(pod.mounts()[path]["name"])
            assert volume["emptyDir"]["sizeLimit"]
        for cache in ("HF_HOME", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME"):
            assert env[cache].startswith(env["HOME"] + "/")
        assert env["HF_HUB_OFFLINE"] == "1"
        # Resources are not cdk8s-plus's 1000m/512Mi..1500m/2048Mi.
        assert server["resources"]["limits"]["cpu"] != "1500m"
        assert server["imagePullPolicy"] == "IfNotPresent"
        assert pod.spec["terminationGracePeriodSeconds"] == 120


def test_deployment_service_budget_and_account(rendered: Rendered) -> None:
    for spec in found(d for d in rendered.platform.deployments if d.engine == "vllm"):
        objects = rendered.objects[spec.name]
        deployment = one(objects, "Deployment")
        assert deployment["spec"]["replicas"] == spec.scaling.min_replicas
        assert deployment["spec"]["strategy"]["rollingUpdate"] == {
            "maxSurge": 1,
            "maxUnavailable": 0,
        }
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        service = one(objects, "Service")
        assert service["metadata"]["name"] == spec.name
        assert service["spec"]["type"] == "ClusterIP"
        assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": 8000}]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        budget = one(objects, "PodDisruptionBudget")
        assert budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        account = one(serving_objects(objects), "ServiceAccount")
        assert account["metadata"]["name"] == names.service_account_name(spec.name)
        assert (
            deployment["spec"]["template"]["spec"]["serviceAccountName"]
            == account["metadata"]["name"]
        )
        for obj in objects:
            if obj["kind"] != "PersistentVolume":
                assert obj["metadata"]["namespace"] == names.INFERENCE_NAMESPACE


def test_server_args_never_contain_removed_flags_for_any_reference_spec(
    reference: Rendered,
) -> None:
    for spec in reference.platform.deployments:
        args = vllm_server_args(spec, bucket_name=CONTEXT.bucket_name)
        assert not set(args) & REMOVED_VLLM_FLAGS


def test_an_exposed_server_loads_the_shipped_key_check_with_its_middleware_flag(
    reference: Rendered,
) -> None:
    """The key reaches vLLM only through VLLM_API_KEY; the project's check, shipped in the
    deployment's ConfigMap on PYTHONPATH, is named by ``--middleware``."""
    pods = _vllm_pods(reference)
    assert pods
    for pod in pods:
        spec = pod.deployment
        flags = _flags(pod.server["args"])
        assert "--api-key" not in flags
        assert flags["--middleware"] == VLLM_API_KEY_MIDDLEWARE
        (config_map,) = [
            c
            for c in of_kind(reference.objects[spec.name], "ConfigMap")
            if c["data"].keys() == {"api_key_auth.py"}
        ]
        assert config_map["data"]["api_key_auth.py"] == module_source(API_KEY_AUTH_MODULE)
        mount = pod.mounts()[SHIPPED_PATH]
        assert mount["readOnly"] is True
        assert pod.volume(mount["name"])["configMap"]["name"] == config_map["metadata"]["name"]
        assert pod.env()["PYTHONPATH"] == SHIPPED_PATH
        deployment = one(reference.objects[spec.name], "Deployment")
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations[CODE_DIGEST_ANNOTATION] == code_digest(config_map["data"])


def test_a_server_not_exposed_ships_no_code(variants: Rendered) -> None:
    for pod in _vllm_pods(variants):
        assert "--middleware" not in pod.server["args"]
        assert SHIPPED_PATH not in pod.mounts()
        config_maps = of_kind(variants.objects[pod.deployment.name], "ConfigMap")
        assert all("api_key_auth.py" not in c["data"] for c in config_maps)
