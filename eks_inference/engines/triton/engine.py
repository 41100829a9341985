"""NVIDIA Triton (``engine: triton``): a Deployment of Triton servers on a typed model repository.

The repository (the spec's ``options``, :mod:`eks_inference.engines.triton.options`) holds
the deployment's LLM on Triton's vLLM backend and, beside it, framework models (ONNX Runtime,
PyTorch). The pod runs Triton's OpenAI-compatible frontend through the project's launcher
(:mod:`eks_inference.serve.triton_openai`), which adds the platform's API-key check and
KServe's v2 inference route for the framework models, on port 8000 like every engine.
The pod comes from :mod:`eks_inference.charts.pod`; its files from
:mod:`eks_inference.engines.triton.repository`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eks_inference import metrics, names
from eks_inference.catalog import Accelerator
from eks_inference.catalog.sizing import pod_resources
from eks_inference.charts import pod, server_deployment, shipped, vllm_server
from eks_inference.charts.api_key import API_KEY_SECRET_NEED, requires_api_key
from eks_inference.charts.context import RenderContext
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import (
    api_object,
    metadata,
    object_labels,
    selector_labels,
    service_account,
)
from eks_inference.charts.model_server import (
    MODEL_MOUNT_PATH,
    OPENAI_PORT,
    WEIGHTS_ROLE,
    keep_alive_seconds,
)
from eks_inference.charts.serving import ChartObjects, ServerInputs, WeightsVolume
from eks_inference.engines.triton import observed as triton_observed
from eks_inference.engines.triton.options import (
    TritonOptions,
    check_gpu_fit,
    check_triton,
    triton_options,
)
from eks_inference.engines.triton.repository import (
    REPOSITORY_PATH,
    RepositoryFile,
    files_digest,
    repository_files,
    version_directories,
)
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.observability.observed import (
    DeploymentKind,
    EngineAlert,
    EngineMetrics,
    EnginePanel,
)
from eks_inference.serve.api_key_auth import API_KEY_ENV
from eks_inference.serve.triton_openai import READY_PATH
from eks_inference.specification.capabilities import (
    AutoscalesOnQueue,
    ServesExtraApiPaths,
    ServesModelRepository,
)
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engine_rules import fixed_unless_autoscaled
from eks_inference.specification.platform import Placement
from eks_inference.specification.routes import Route
from eks_inference.specification.validation import Problems, Rule

if TYPE_CHECKING:
    from eks_inference.charts.mountpoint import MountpointVolume

COMPONENT = "triton"
# KServe's v2 inference routes of the framework models, forwarded beside the OpenAI API.
V2_MODELS_PATH = "/v2/models"
CONTAINER_NAME = "triton"
# The launcher, shipped with the API-key check as the package shipped.SHIPPED_PACKAGE.
LAUNCHER_MODULE = "triton_openai"
LAUNCHER_COMMAND = ("python3", "-m", f"{shipped.SHIPPED_PACKAGE}.{LAUNCHER_MODULE}")
SHIPPED_MODULES = ("__init__", shipped.API_KEY_AUTH_MODULE, LAUNCHER_MODULE)
# Where the image keeps the frontend's modules (engine/, frontend/, utils/), which the
# launcher imports; the image's Dockerfile copies python/openai to /opt/tritonserver/python.
OPENAI_FRONTEND_PATH = "/opt/tritonserver/python/openai/openai_frontend"
# The frontend's default for a request without max_tokens (its --default-max-tokens), kept.
DEFAULT_MAX_TOKENS = 16
# The ConfigMap of the generated files, the Mountpoint volume of the framework models' files,
# and the writable directory the pod assembles the repository in from both.
REPOSITORY_CONFIG_VOLUME = "model-repository-config"
REPOSITORY_FILES_ROLE = "model-repository"
_REPOSITORY_SKELETON_VOLUME = "model-repository-root"
_REPOSITORY_SKELETON_MIB = 16
REPOSITORY_DIGEST_ANNOTATION = "eks-inference.io/model-repository-sha256"


def repository_config_map_name(spec: ModelDeploymentSpec) -> str:
    """The ConfigMap of ``spec``'s generated repository files: ``<deployment>-model-repository``."""
    return f"{spec.name}-model-repository"


def _repository_mounts(
    spec: ModelDeploymentSpec,
    options: TritonOptions,
    files: tuple[RepositoryFile, ...],
    volume: MountpointVolume | None,
) -> tuple[list[pod.Json], list[pod.Json]]:
    """The repository's volumes and mounts: each generated file and each version directory
    mounted by ``subPath`` below a writable skeleton at :data:`REPOSITORY_PATH`."""
    volumes = [
        pod.empty_dir(_REPOSITORY_SKELETON_VOLUME, f"{_REPOSITORY_SKELETON_MIB}Mi"),
        {"name": REPOSITORY_CONFIG_VOLUME, "configMap": {"name": repository_config_map_name(spec)}},
    ]
    mounts = [pod.mount(_REPOSITORY_SKELETON_VOLUME, REPOSITORY_PATH)]
    for file in files:
        mounts.append(
            {
                **pod.mount(
                    REPOSITORY_CONFIG_VOLUME, f"{REPOSITORY_PATH}/{file.path}", read_only=True
                ),
                "subPath": file.key,
            }
        )
    if volume is not None:
        volumes.append(pod.claim_volume(REPOSITORY_FILES_ROLE, volume.claim_name))
        mounts.extend(
            {
                **pod.mount(
                    REPOSITORY_FILES_ROLE, f"{REPOSITORY_PATH}/{directory}", read_only=True
                ),
                "subPath": directory,
            }
            for directory in version_directories(options)
        )
    return volumes, mounts


def _pod(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    service_account: str,
    weights: WeightsVolume,
    volume: MountpointVolume | None,
    route: Route | None,
    code: shipped.ShippedCode,
    files: tuple[RepositoryFile, ...],
) -> pod.Json:
    options = triton_options(spec)
    share = pod_resources(spec.instance, spec.replicas_per_node)
    repository_volumes, repository_mounts = _repository_mounts(spec, options, files, volume)
    scratch_volumes, scratch_mounts = vllm_server.scratch_volumes(share.memory_mib)
    volumes = [
        *scratch_volumes,
        pod.claim_volume(WEIGHTS_ROLE, weights.claim_name),
        *repository_volumes,
        code.volume,
    ]
    mounts = [
        *scratch_mounts,
        pod.mount(WEIGHTS_ROLE, MODEL_MOUNT_PATH, read_only=True),
        *repository_mounts,
        code.mount,
    ]
    args = [
        "--model-repository",
        REPOSITORY_PATH,
        "--tokenizer",
        MODEL_MOUNT_PATH,
        "--port",
        str(OPENAI_PORT),
        "--default-max-tokens",
        str(DEFAULT_MAX_TOKENS),
    ]
    for model in options.framework_models:
        args += ["--framework-model", model.name]
    environment = {
        **vllm_server.server_environment(spec, context),
        # The launcher's package first, then the frontend's modules from the image.
        "PYTHONPATH": f"{shipped.SHIPPED_PATH}:{OPENAI_FRONTEND_PATH}",
    }
    env = pod.env(environment)
    if route is not None:
        args += ["--keep-alive-seconds", str(keep_alive_seconds(route))]
    if requires_api_key(route):
        args.append("--require-api-key")
        env.append(
            pod.secret_env(
                API_KEY_ENV, secret=API_KEY_SECRET_NEED.name, key=API_KEY_SECRET_NEED.key
            )
        )
    container = server_deployment.container(
        spec,
        name=CONTAINER_NAME,
        image=options.image_uri,
        command=LAUNCHER_COMMAND,
        args=args,
        env=env,
        resources=pod.resources(
            {"cpu": share.cpu, "memory": share.memory, **pod.accelerator_resource(spec)}
        ),
        # The frontend's readiness route: 200 once every model of the repository is ready.
        health_path=READY_PATH,
        mounts=mounts,
    )
    return server_deployment.pod_spec(spec, placement.workers, service_account, container, volumes)


def _check_block_size(spec: ModelDeploymentSpec, problems: Problems) -> None:
    # vLLM 0.11.0, the Triton image's, takes block sizes up to 128 (BlockSize in
    # vllm/config/cache.py); 256 arrived later and would stop the model loading.
    if spec.limits.block_size > TRITON_VLLM_MAX_BLOCK_SIZE:
        problems.add(
            ("limits", "block_size"),
            f"the vLLM of the Triton image takes block sizes up to {TRITON_VLLM_MAX_BLOCK_SIZE}; "
            f"use block_size {TRITON_VLLM_MAX_BLOCK_SIZE} or less",
            spec.limits.block_size,
        )


TRITON_VLLM_MAX_BLOCK_SIZE = 128


def _served_model_names(spec: ModelDeploymentSpec) -> tuple[str, ...]:
    """Clients name the repository's LLM by its model name."""
    return (triton_options(spec).llm.name,)


def _mounted_prefixes(spec: ModelDeploymentSpec) -> tuple[str, ...]:
    """The framework models' files, mounted beside the weights."""
    prefix = triton_options(spec).mounted_prefix
    return () if prefix is None else (prefix,)


def _v2_paths(spec: ModelDeploymentSpec) -> tuple[str, ...]:
    """With framework models, KServe's v2 routes they answer on."""
    return (V2_MODELS_PATH,) if triton_options(spec).framework_models else ()


class TritonEngine(server_deployment.DeploymentEngine):
    """Triton: a Deployment, a ClusterIP Service, a PDB, a ServiceAccount and the repository.

    - **ConfigMap** ``<deployment>-model-repository``: every model's ``config.pbtxt`` and the
      LLM's ``model.json`` (:mod:`eks_inference.engines.triton.repository`); the pod template
      carries their digest, so a changed repository rolls the pods.
    - **PersistentVolume and claim** ``<deployment>-model-repository``, when the repository
      has framework models: the Mountpoint volume of ``options.repository_prefix``, whose
      version directories the pod mounts by ``subPath``.
    - **ConfigMap** ``<deployment>-serve-app``: the launcher and the API-key check.
    - **Deployment** of ``scaling.min_replicas`` pods, one model replica each on
      ``tensor_parallel_size`` GPUs, rolled one extra pod at a time and never below the
      count; **Service** ``<deployment>`` on port 8000; **PodDisruptionBudget** of one.

    The pod is standalone vLLM's (:mod:`eks_inference.engines.vllm.engine`): a root image
    with a read-only root filesystem and bounded emptyDirs, Guaranteed resources from the
    instance size, the weights volume at ``/mnt/model`` (vLLM's model and the frontend's
    tokenizer), HTTP probes on the frontend's readiness route (200 once every model of the
    repository is ready), the startup probe sized for the model load. Weights are read
    through Mountpoint only: the frontend loads its tokenizer from a directory.
    """

    name = "triton"
    summary = "NVIDIA Triton on a typed model repository"
    component = COMPONENT
    health_path = READY_PATH
    accelerators = frozenset({Accelerator.NVIDIA})
    not_served_on = {
        Accelerator.NEURON: "the pinned Triton image's vLLM backend is a CUDA build; serve "
        "Inferentia2 with engine: vllm or rayservice",
    }
    options = TritonOptions
    capabilities = (
        ServesModelRepository(_served_model_names, _mounted_prefixes),
        ServesExtraApiPaths(_v2_paths),
        # KEDA reads the requests pending in Triton's schedulers
        # (nv_inference_pending_request_count).
        AutoscalesOnQueue(),
    )

    def rules(self) -> tuple[Rule[ModelDeploymentSpec], ...]:
        sized = frozenset(
            {
                "options",
                "model",
                "instance_type",
                "tensor_parallel_size",
                "limits.max_model_len",
                "limits.max_num_seqs",
                "limits.gpu_memory_utilization",
            }
        )
        return (
            Rule(frozenset({"options"}), check_triton),
            Rule(sized, check_gpu_fit),
            Rule(frozenset({"limits.block_size"}), _check_block_size),
            Rule(
                frozenset({"scaling.min_replicas", "scaling.max_replicas", "scaling.autoscale"}),
                fixed_unless_autoscaled,
            ),
        )

    def server(self, given: ServerInputs) -> ChartObjects:
        spec, placement, context, weights, _, route = given
        if weights is None:
            raise ValueError(
                f"deployment {spec.name!r}: Triton reads the LLM and its tokenizer from the "
                "weights volume; pass one"
            )
        # The volume builder's module defines its chart too (cdk8s): imported when rendering only,
        # so that validating a spec never starts Node.js.
        from eks_inference.charts.mountpoint import cache_size_gib, deployment_volume

        options = triton_options(spec)
        labels = object_labels(spec, COMPONENT)
        account = names.service_account_name(spec.name)
        selector = selector_labels(spec, COMPONENT)
        engine_args = vllm_server.vllm_engine_args(spec, bucket_name=context.bucket_name)
        files = repository_files(options, engine_args)
        code = shipped.shipped_code(spec, labels, SHIPPED_MODULES, package=shipped.SHIPPED_PACKAGE)
        repository = api_object(
            "v1",
            "ConfigMap",
            metadata(repository_config_map_name(spec), labels),
            {"data": {file.key: file.content for file in files}},
        )
        volume = (
            deployment_volume(
                spec,
                REPOSITORY_FILES_ROLE,
                bucket_name=context.bucket_name,
                region=context.region,
                prefix=options.mounted_prefix,
                cache_size_gib=cache_size_gib(0),
            )
            if options.mounted_prefix is not None
            else None
        )
        pod_spec = _pod(spec, placement, context, account, weights, volume, route, code, files)
        deployment = server_deployment.deployment(
            spec,
            labels,
            selector,
            pod_spec,
            annotations={
                **dict(code.annotations),
                REPOSITORY_DIGEST_ANNOTATION: files_digest(files),
            },
        )
        service, disruption_budget = server_deployment.service_and_disruption_budget(
            spec, labels, selector
        )
        account_object = service_account(account, labels)
        volume_objects = (
            volume.objects(object_labels(spec, REPOSITORY_FILES_ROLE)) if volume else []
        )
        return ChartObjects(
            (
                account_object,
                *volume_objects,
                code.config_map,
                repository,
                deployment,
                service,
                disruption_budget,
            ),
            PlatformNeeds(
                namespaces=(INFERENCE_NAMESPACE,),
                mounted_prefixes=(volume.mounted,) if volume is not None else (),
                secrets=(API_KEY_SECRET_NEED,) if requires_api_key(route) else (),
                pods=(server_deployment.scheduling_need(spec, placement.workers, pod_spec),),
            ),
        )

    def kind(self, spec: ModelDeploymentSpec) -> DeploymentKind:
        return DeploymentKind("triton-gpu", "Triton on GPU")

    def metrics(self, spec: ModelDeploymentSpec) -> EngineMetrics:
        return EngineMetrics(
            running=None,
            waiting=(metrics.TRITON_PENDING_REQUESTS,),
            kv_cache=None,
            ttft=metrics.TRITON_VLLM_TIME_TO_FIRST_TOKEN,
            itl=metrics.TRITON_VLLM_TIME_PER_OUTPUT_TOKEN,
            e2e=metrics.TRITON_VLLM_E2E_LATENCY,
            prompt_tokens=metrics.TRITON_VLLM_PROMPT_TOKENS,
            generation_tokens=metrics.TRITON_VLLM_GENERATION_TOKENS,
        )

    def autoscaler(self, spec: ModelDeploymentSpec) -> str:
        if spec.scaling.autoscale:
            return "KEDA adds a replica per quarter batch of requests pending in Triton"
        return "fixed size: Triton's replicas are set by scaling.min_replicas"

    def own_alerts(self, spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
        return triton_observed.alerts(spec)

    def own_panels(self, spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
        return triton_observed.panels(spec)
