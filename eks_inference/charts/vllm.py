"""Standalone vLLM: a Deployment of OpenAI-compatible servers, its Service, budget and identity.

The pod comes from :mod:`eks_inference.charts.pod`, like every other pod of the project; the
Service and the PodDisruptionBudget select it by the deployment's instance and component
labels.
"""

from __future__ import annotations

import math

from constructs import Construct

from eks_inference import names
from eks_inference.charts import engine, pod, shipped
from eks_inference.charts.common import (
    API_KEY_ENV,
    API_KEY_SECRET_NEED,
    ARTIFACTS_MOUNT_PATH,
    ARTIFACTS_ROLE,
    HEALTH_PATH,
    MODEL_MOUNT_PATH,
    OPENAI_PORT,
    WEIGHTS_ROLE,
    DeploymentChart,
    RenderContext,
    api_object,
    compiled_artifacts_path,
    gates_on_compiled_artifacts,
    keep_alive_seconds,
    memory_share_mib,
    metadata,
    object_labels,
    requires_api_key,
    selector_labels,
)
from eks_inference.charts.contract import PlatformNeeds, ServiceAccountNeed
from eks_inference.charts.mountpoint import MountpointVolume
from eks_inference.load_budget import model_load_seconds, rollout_seconds
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.sizing import pod_resources
from eks_inference.spec.deployment import VLLM_ROLLOUT_SURGE, ModelDeploymentSpec
from eks_inference.spec.platform import Placement
from eks_inference.spec.routes import Route
from eks_inference.versions import NEURON_VLLM_IMAGE, VLLM_GPU_IMAGE

COMPONENT = "vllm"
CONTAINER_NAME = "vllm"
# The server's one port: the OpenAI API and, on the same port, vLLM's Prometheus /metrics.
HTTP_PORT_NAME = "http"
METRICS_PATH = "/metrics"
# Writable directories on a read-only root filesystem: HOME (and with it every cache vLLM,
# Hugging Face, Triton, FlashInfer and torch keep under ~/.cache) and /tmp (torch inductor,
# Neuron compiler work directories). Bounded so that a runaway cache is evicted rather than
# filling the node's disk, which three pods of an inf2.48xlarge share.
HOME_PATH = "/home/vllm"
TMP_PATH = "/tmp"
SHM_PATH = "/dev/shm"
_HOME_MIB = 16 * 1024
_TMP_MIB = 16 * 1024
# /dev/shm: a quarter of the pod's memory, at most 16 GiB. vLLM's engine processes exchange
# inputs through shared memory and NCCL uses it between tensor-parallel ranks; the container
# runtime's default of 64 MiB makes both fail.
_SHM_FRACTION = 0.25
_SHM_CAP_MIB = 16 * 1024
# Probes on vLLM's /health (200 when the engine is alive, 503 when it is dead). The startup
# probe allows the whole model load budget; after that a replica leaves the Service after 30
# seconds of failures and is restarted after 90.
_PROBE_PERIOD_S = 10
_PROBE_TIMEOUT_S = 5
_READINESS_FAILURES = 3
_LIVENESS_PERIOD_S = 30
_LIVENESS_TIMEOUT_S = 10
_LIVENESS_FAILURES = 3
# On termination: keep serving for 10 s while endpoints drop the pod, then let in-flight
# generations finish within two minutes. The load balancer drains a target for as long
# (eks_inference.charts.endpoint), so a generation in flight is never cut off by either.
_PRE_STOP_SLEEP_S = 10
TERMINATION_GRACE_S = 120


def shared_memory_mib(memory_mib: int) -> int:
    """Size of the memory-backed ``/dev/shm`` of a vLLM container with ``memory_mib``."""
    return memory_share_mib(memory_mib, _SHM_FRACTION, _SHM_CAP_MIB)


def server_environment(spec: ModelDeploymentSpec, context: RenderContext) -> dict[str, str]:
    """Environment of a vLLM OpenAI server container of ``spec``.

    Caches go under the writable HOME; the Hugging Face Hub is never contacted (weights come
    from the model bucket only). The Run:ai streamer's S3 client gets the region explicitly
    (credentials come from Pod Identity). On Neuron the runtime gets TP cores, the plugin the
    compiled-artifacts path and the compiler a cache on the writable HOME (its default,
    /var/tmp, is on the read-only root). The Neuron compile job runs the same server with
    this environment, pointing only ``NEURON_COMPILED_ARTIFACTS`` elsewhere.
    """
    env = {
        "HOME": HOME_PATH,
        "XDG_CACHE_HOME": f"{HOME_PATH}/.cache",
        "HF_HOME": f"{HOME_PATH}/.cache/huggingface",
        "VLLM_CACHE_ROOT": f"{HOME_PATH}/.cache/vllm",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if spec.weights.loader == "runai_streamer":
        env["AWS_REGION"] = context.region
        env["AWS_DEFAULT_REGION"] = context.region
    if spec.on_neuron:
        env["NEURON_RT_NUM_CORES"] = str(spec.tensor_parallel_size)
        env["NEURON_COMPILED_ARTIFACTS"] = compiled_artifacts_path(spec)
        env["NEURON_COMPILE_CACHE_URL"] = f"{HOME_PATH}/.cache/neuron-compile-cache"
    return env


class VllmChart(DeploymentChart):
    """A standalone vLLM deployment: Deployment, ClusterIP Service, PDB and ServiceAccount.

    - **ServiceAccount** ``names.service_account_name(spec.name)``: with the Run:ai streamer
      its pods read the weights prefix with their own identity, recorded in :attr:`needs` for
      the CDK side to give it a Pod Identity role; otherwise it has no AWS access at all.
    - **Deployment** of ``spec.scaling.min_replicas`` pods (a fixed count unless
      ``scaling.autoscale``, when the count is left to the KEDA autoscaler of
      :mod:`eks_inference.charts.autoscaling`), each one model replica on
      ``tensor_parallel_size`` NeuronCores or GPUs. Rolls
      :data:`~eks_inference.spec.deployment.VLLM_ROLLOUT_SURGE` extra replica at a time and
      never below the current count (``maxUnavailable`` 0), so a rollout needs room for one
      more replica in the node pool. Pods are selected by the deployment's instance and
      component labels.
    - **Service** ``<deployment>``: ClusterIP, OpenAI API on port 8000.
    - **PodDisruptionBudget**: one replica at a time may be evicted, so node drains proceed
      without taking the whole model down; unhealthy pods may always be evicted. A replica
      that is still loading is unready, so the budget cannot protect it: its pods carry
      ``karpenter.sh/do-not-disrupt`` for the rollout budget (image pull and model load), so
      Karpenter never moves a replica mid-load; once loaded, the budget governs.

    The pod (:mod:`eks_inference.charts.pod`): root images with a read-only root filesystem and
    bounded emptyDirs for HOME and /tmp, a memory-backed /dev/shm; CPU and memory from the
    instance size with requests equal to limits (Guaranteed QoS, so the kubelet never evicts
    a loaded model first); images pulled only if not present (pinned tags, tens of GiB); HTTP
    probes on ``/health``, the startup probe sized for the model load; the pool's selector and
    tolerations, and the Neuron scheduler for part of a node's cores.

    Exposed on a load balancer (``route``), the server keeps idle connections open past the
    load balancer's idle timeout. When the route requires the platform's API key, the pod
    reads it from the platform's Secret into ``VLLM_API_KEY`` only, never into its arguments:
    vLLM reads the variable itself, while ``--api-key`` would put the key in every process
    listing and, on vLLM 0.16, in the startup log's "non-default args" line. The project's
    API-key check (``api_key_auth``, shipped in the ConfigMap ``<deployment>-serve-app`` on
    ``PYTHONPATH``) is loaded with ``--middleware`` and answers every request without
    ``Authorization: Bearer <key>`` with OpenAI's 401, on every path but ``/health`` (the
    probes and the load balancer's health checks) and ``/metrics`` (Prometheus, in-cluster;
    the load balancer never forwards it). vLLM's own check, which guards only some prefixes,
    stays on behind it. :attr:`needs` records the Secret.
    """

    def __init__(
        self,
        scope: Construct,
        spec: ModelDeploymentSpec,
        placement: Placement,
        context: RenderContext,
        *,
        weights: MountpointVolume | None,
        artifacts: MountpointVolume | None,
        route: Route | None = None,
    ) -> None:
        if (weights is None) != (spec.weights.loader == "runai_streamer"):
            raise ValueError(
                f"deployment {spec.name!r} loads weights with {spec.weights.loader}: pass a "
                "weights volume exactly when the loader is mountpoint"
            )
        labels = object_labels(spec, COMPONENT)
        account = names.service_account_name(spec.name)
        service_account = api_object(
            "v1",
            "ServiceAccount",
            metadata(account, labels),
            {"automountServiceAccountToken": False},
        )
        selector = selector_labels(spec, COMPONENT)
        # With autoscaling the replica count belongs to the autoscaler: a count in the
        # manifest would reset it to min_replicas on every apply, in the middle of a burst.
        replicas = {} if spec.scaling.autoscale else {"replicas": spec.scaling.min_replicas}
        code = (
            shipped.shipped_code(spec, labels, (shipped.API_KEY_AUTH_MODULE,))
            if requires_api_key(route)
            else None
        )
        pod_spec = _pod(spec, placement, context, account, weights, artifacts, route, code)
        deployment = api_object(
            "apps/v1",
            "Deployment",
            metadata(spec.name, labels),
            {
                "spec": {
                    **replicas,
                    "selector": {"matchLabels": selector},
                    "strategy": {
                        "type": "RollingUpdate",
                        "rollingUpdate": {"maxSurge": VLLM_ROLLOUT_SURGE, "maxUnavailable": 0},
                    },
                    # A rollout is stuck only once a new replica has had time for a node, an
                    # image pull and a model load.
                    "progressDeadlineSeconds": rollout_seconds(spec),
                    "template": {
                        # Karpenter leaves a replica alone while it may still be loading.
                        "metadata": {
                            "labels": labels,
                            "annotations": {
                                **pod.do_not_disrupt(rollout_seconds(spec)),
                                **dict(code.annotations if code is not None else ()),
                            },
                        },
                        "spec": pod_spec,
                    },
                }
            },
        )
        service = api_object(
            "v1",
            "Service",
            metadata(spec.name, labels),
            {
                "spec": {
                    "type": "ClusterIP",
                    "selector": selector,
                    "ports": [
                        {"name": HTTP_PORT_NAME, "port": OPENAI_PORT, "targetPort": OPENAI_PORT}
                    ],
                }
            },
        )
        disruption_budget = api_object(
            "policy/v1",
            "PodDisruptionBudget",
            metadata(spec.name, labels),
            {
                "spec": {
                    "maxUnavailable": 1,
                    "selector": {"matchLabels": selector},
                    "unhealthyPodEvictionPolicy": "AlwaysAllow",
                }
            },
        )
        identity: tuple[ServiceAccountNeed, ...] = ()
        if spec.weights.loader == "runai_streamer":
            identity = (
                ServiceAccountNeed(
                    role=names.SERVER_IDENTITY,
                    name=account,
                    namespace=INFERENCE_NAMESPACE,
                    pods="Model servers",
                    purpose=f"stream the weights under {spec.weights.prefix}",
                    reads=(spec.weights.prefix,),
                ),
            )
        super().__init__(
            scope,
            spec,
            COMPONENT,
            [
                service_account,
                *((code.config_map,) if code is not None else ()),
                deployment,
                service,
                disruption_budget,
            ],
            PlatformNeeds(
                namespaces=(INFERENCE_NAMESPACE,),
                service_accounts=identity,
                secrets=(API_KEY_SECRET_NEED,) if requires_api_key(route) else (),
                pods=(
                    pod.scheduling_need(
                        (f"Deployment/{spec.name}", "spec", "template"),
                        placement.workers,
                        pod_spec,
                        per_node=spec.replicas_per_node,
                    ),
                ),
            ),
        )


def _pod(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    service_account: str,
    weights: MountpointVolume | None,
    artifacts: MountpointVolume | None,
    route: Route | None,
    code: shipped.ShippedCode | None,
) -> pod.Json:
    share = pod_resources(spec.instance, spec.replicas_per_node)
    image = NEURON_VLLM_IMAGE if spec.on_neuron else VLLM_GPU_IMAGE
    volumes = [
        pod.empty_dir("home", f"{_HOME_MIB}Mi"),
        pod.empty_dir("tmp", f"{_TMP_MIB}Mi"),
        pod.empty_dir("shm", f"{shared_memory_mib(share.memory_mib)}Mi", in_memory=True),
    ]
    # HOME, /tmp, /dev/shm, then the read-only model volumes and the shipped code.
    mounts = [pod.mount("home", HOME_PATH), pod.mount("tmp", TMP_PATH), pod.mount("shm", SHM_PATH)]
    if weights is not None:
        volumes.append(pod.claim_volume(WEIGHTS_ROLE, weights.claim_name))
        mounts.append(pod.mount(WEIGHTS_ROLE, MODEL_MOUNT_PATH, read_only=True))
    if artifacts is not None:
        volumes.append(pod.claim_volume(ARTIFACTS_ROLE, artifacts.claim_name))
        mounts.append(pod.mount(ARTIFACTS_ROLE, ARTIFACTS_MOUNT_PATH, read_only=True))
    load_seconds = model_load_seconds(spec)
    args = engine.vllm_server_args(spec, bucket_name=context.bucket_name)
    environment = pod.env(server_environment(spec, context))
    if route is not None:
        environment += pod.env({"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(keep_alive_seconds(route))})
    if code is not None:
        volumes.append(code.volume)
        mounts.append(code.mount)
        environment += pod.env(dict(code.env))
        environment.append(
            pod.secret_env(
                API_KEY_ENV, secret=API_KEY_SECRET_NEED.name, key=API_KEY_SECRET_NEED.key
            )
        )
        args += ["--middleware", shipped.VLLM_API_KEY_MIDDLEWARE]
    container = {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "command": list(engine.VLLM_SERVE_COMMAND),
        "args": args,
        # Named, so that the PodMonitor scraping /metrics refers to the port by its name.
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": OPENAI_PORT, "protocol": "TCP"}],
        "env": environment,
        "resources": pod.resources(
            {"cpu": share.cpu, "memory": share.memory, **pod.accelerator_resource(spec)}
        ),
        "securityContext": pod.ROOT_IMAGE_SECURITY,
        "startupProbe": _health_probe(failure_threshold=math.ceil(load_seconds / _PROBE_PERIOD_S)),
        "readinessProbe": _health_probe(failure_threshold=_READINESS_FAILURES),
        "livenessProbe": _health_probe(
            failure_threshold=_LIVENESS_FAILURES,
            period_seconds=_LIVENESS_PERIOD_S,
            timeout_seconds=_LIVENESS_TIMEOUT_S,
        ),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(_PRE_STOP_SLEEP_S)]}}},
        "volumeMounts": mounts,
    }
    spec_json: pod.Json = {
        "serviceAccountName": service_account,
        # Pod Identity mounts its own token; the Kubernetes API is never called.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "securityContext": pod.ROOT_IMAGE_POD_SECURITY,
        **pod.placement(placement.workers, spec),
        "containers": [container],
        "volumes": volumes,
    }
    if artifacts is not None and gates_on_compiled_artifacts(spec):
        spec_json["initContainers"] = [
            pod.artifacts_gate(
                spec,
                image=image,
                bucket_name=context.bucket_name,
                security=pod.ROOT_IMAGE_SECURITY,
            )
        ]
    return spec_json


def _health_probe(
    *,
    failure_threshold: int,
    period_seconds: int = _PROBE_PERIOD_S,
    timeout_seconds: int = _PROBE_TIMEOUT_S,
) -> pod.Json:
    return pod.http_probe(
        HEALTH_PATH,
        port=OPENAI_PORT,
        period_seconds=period_seconds,
        timeout_seconds=timeout_seconds,
        failure_threshold=failure_threshold,
    )
