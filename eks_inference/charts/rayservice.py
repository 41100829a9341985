"""Ray Serve on KubeRay: a RayService that autoscales model replicas on queue depth.

A CPU head (GCS, Serve controller, HTTP proxy, autoscaler) and one worker group on the
accelerator pool, one Serve replica per worker pod. Serve adds replicas when ongoing requests
per replica exceed the target; the in-tree Ray autoscaler adds a worker pod for each replica
that does not fit; the Cluster Autoscaler adds a node for each pod that does not fit.

Head and worker pods come from :mod:`eks_inference.charts.pod`, like every other pod of the
project. KubeRay injects the Ray readiness and liveness probes (raylet and Serve proxy health)
and wires the ports it needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from constructs import Construct

from eks_inference import names
from eks_inference.charts import engine, pod, shipped
from eks_inference.charts.common import (
    API_KEY_ENV,
    API_KEY_SECRET_NEED,
    ARTIFACTS_MOUNT_PATH,
    ARTIFACTS_ROLE,
    MODEL_MOUNT_PATH,
    OPENAI_PORT,
    WEIGHTS_ROLE,
    DeploymentChart,
    RenderContext,
    api_object,
    compiled_artifacts_path,
    dump_yaml,
    gates_on_compiled_artifacts,
    keep_alive_seconds,
    memory_share_mib,
    metadata,
    object_labels,
    requires_api_key,
)
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.mountpoint import MountpointVolume
from eks_inference.load_budget import rollout_seconds
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.sizing import pod_resources
from eks_inference.spec.deployment import ModelDeploymentSpec
from eks_inference.spec.platform import Placement
from eks_inference.spec.routes import Route
from eks_inference.versions import RAY_HEAD_GPU_IMAGE, RAY_LLM_GPU_IMAGE, RAY_VERSION

COMPONENT = "rayservice"
# Components of the Ray pods (their `app.kubernetes.io/component` label and container names).
HEAD_COMPONENT = "ray-head"
WORKER_COMPONENT = "ray-worker"
RAY_API_VERSION = "ray.io/v1"
INITIALIZING_TIMEOUT_ANNOTATION = "ray.io/initializing-timeout"
# The Serve proxies' keep-alive on the pod templates: Serve reads its HTTP options only when it
# starts, so a changed value changes the cluster spec and KubeRay rolls a new cluster with it.
KEEP_ALIVE_ANNOTATION = "eks-inference.io/http-keep-alive-seconds"
# Head and workers: Kubernetes' default grace, written out because the load balancer drains a
# Ray target for as long (eks_inference.charts.endpoint). Ray Serve drains a node's proxy
# before the autoscaler removes its pod, so requests have left it by then.
TERMINATION_GRACE_S = 30
# The project's modules the Serve application imports (the Neuron package and the API-key check
# it imports), on PYTHONPATH in head and workers as the package shipped.SHIPPED_PACKAGE, so Serve
# imports them wherever it builds or runs the application (eks_inference.charts.shipped).
SERVE_APP_MODULES = (shipped.API_KEY_AUTH_MODULE, *shipped.package_modules(shipped.NEURON_PACKAGE))

# The head runs GCS, the Serve controller and proxy, the dashboard and (as a sidecar) the
# autoscaler, but no replicas (num-cpus 0): 2 vCPUs and 8 GiB, which leave room for the
# system add-ons even on a 4-vCPU, 16-GiB system node.
_HEAD_CPU = "2"
_HEAD_MEMORY_MIB = 8 * 1024
_AUTOSCALER_CPU = "500m"
_AUTOSCALER_MEMORY = "1Gi"
# Ray's object store lives in /dev/shm. Serving passes small objects (requests, tokens), so it
# gets a quarter of a pod's memory but at most 16 GiB, leaving the rest to the engine's host
# buffers; /dev/shm is 2 GiB larger for vLLM's engine processes and NCCL, which also use it.
_OBJECT_STORE_FRACTION = 0.25
_OBJECT_STORE_CAP_MIB = 16 * 1024
_SHM_HEADROOM_MIB = 2 * 1024
# Ray autoscaler: remove a worker pod 5 minutes after its replica is gone (Serve waits 10
# minutes of low load before removing one, so a pod that idles is not wanted back soon),
# freeing its accelerators and, once empty, its node. Upscaling is not rate-limited: Serve
# has already smoothed demand, and each new pod waits minutes for a node and a model load.
_IDLE_TIMEOUT_S = 300
_UPSCALING_MODE = "Aggressive"
# Every Ray node exports Ray's, Serve's and (through Ray's stat logger) vLLM's metrics on
# KubeRay's default metrics-export-port, 8080, under the port name KubeRay looks for
# ("metrics"): declared on head and workers alike, so the PodMonitors that scrape them name a
# port each pod template has (KubeRay 1.7 adds the same port when it is missing).
RAY_METRICS_PORT_NAME = "metrics"
RAY_METRICS_PORT = 8080
_METRICS_PORT = (RAY_METRICS_PORT_NAME, RAY_METRICS_PORT)
# The head's dashboard (job and Serve APIs) and Serve proxy, under the port names KubeRay
# looks them up by; the operator calls both.
DASHBOARD_PORT_NAME = "dashboard"
SERVE_PORT_NAME = "serve"
_HEAD_PORTS = (
    ("gcs-server", 6379),
    (DASHBOARD_PORT_NAME, 8265),
    ("client", 10001),
    (SERVE_PORT_NAME, OPENAI_PORT),
    _METRICS_PORT,
)
# Ray token authentication: KubeRay generates a random token into a Secret named after each
# RayCluster, gives it to every Ray container (head, workers, autoscaler, the wait-for-GCS init
# container) as RAY_AUTH_TOKEN with RAY_AUTH_MODE=token, and sends it on its own dashboard
# calls. Ray then refuses its dashboard, dashboard agent and gRPC (GCS, raylet) calls without
# it, health checks aside (the probes need none). Requires rayVersion 2.52.0 or later.
_AUTH_OPTIONS = {"mode": "token"}


def serve_service_name(spec: ModelDeploymentSpec) -> str:
    """The Service KubeRay creates for a RayService's Serve proxies: ``<name>-serve-svc``."""
    return names.ray_serve_service_name(spec.name)


@dataclass(frozen=True)
class _ServeAppFiles:
    """What head and worker pods need to import and run the Serve application.

    Nothing for Ray Serve LLM's own application on GPUs; the project's modules
    (:data:`SERVE_APP_MODULES`) when the application is the Neuron one or requires the API key.
    """

    volumes: tuple[pod.Json, ...] = ()
    mounts: tuple[pod.Json, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[pod.Json, ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()


class RayServiceChart(DeploymentChart):
    """A RayService serving one model through Ray Serve, with its ServiceAccount.

    Objects: the ServiceAccount ``names.service_account_name(spec.name)`` (head and workers;
    KubeRay binds the autoscaler's role to it; its pods get no AWS credentials, since the
    weights come through Mountpoint), on Inferentia2 (and whenever the API key is required) a
    ConfigMap holding the project's Serve modules (:mod:`eks_inference.charts.shipped`), and
    the RayService ``<deployment>``, served by KubeRay's ``<deployment>-serve-svc``
    (:func:`serve_service_name`) on port 8000.
    :attr:`needs` names the RayService CRD and, with an API key, the platform's Secret.

    Decisions:

    - Head on the CPU pool (``placement.head``) with ``num-cpus``/``num-gpus`` 0 and no
      accelerator resources; the only pod with a service-account token, for the autoscaler.
    - One worker group on ``placement.workers`` with ``minReplicas``/``maxReplicas`` from the
      spec's scaling; a worker requests exactly TP NeuronCores or GPUs, so one Serve replica
      fills it, and CPU/memory are the node's share per replica.
    - In-tree autoscaling (v2) with a 5-minute idle timeout and unthrottled upscaling.
    - Ray token authentication (``authOptions.mode: token``): the dashboard's job and Serve
      APIs and Ray's internal gRPC calls need the cluster's token, which KubeRay generates
      per cluster, keeps in a Secret and gives only to its own Ray containers. The
      deployment's NetworkPolicies (:mod:`eks_inference.charts.network_policy`) also keep
      every other pod off those ports.
    - ``upgradeStrategy: NewCluster``: a changed cluster spec starts a new cluster and moves
      traffic when it serves, so upgrades have no downtime but need capacity for a second
      set of replicas while both run.
    - ``ray.io/initializing-timeout`` is the rollout budget (node launch, image pull, model
      load): past it KubeRay marks the service failed rather than waiting forever.
    - ``karpenter.sh/do-not-disrupt``: Karpenter never moves the head (every replica of the
      cluster would restart) and leaves a worker alone for the rollout budget, while its
      replica may still be loading; a loaded worker may be moved, one node at a time.
    - With ``min_replicas`` >= 1 the head is left out of the serve Service, so requests go
      straight to worker proxies; with 0 it stays in, since its proxy is what receives the
      first request and triggers a scale-up from zero.
    - Exposed on a load balancer (``route``): the proxies keep idle connections past its idle
      timeout, and when the route requires the platform's API key, head and workers read it
      from the platform's Secret into ``VLLM_API_KEY``, whose name the Serve application is
      given; the application answers every request but ``/health`` without ``Authorization:
      Bearer <key>`` with 401 (``api_key_auth.APIKeyMiddleware``, on Ray Serve LLM's
      application too). Serve's proxy answers its own ``/-/healthz`` and ``/-/routes``
      unchecked; the load balancer forwards neither (:mod:`eks_inference.charts.endpoint`).

    The RayService's fields are written in reading order (what it serves, then the cluster
    that serves it), not sorted.
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
        if weights is None:
            raise ValueError(
                f"deployment {spec.name!r}: Ray Serve workers read weights from a Mountpoint "
                "volume; pass one"
            )
        labels = object_labels(spec, COMPONENT)
        account = names.service_account_name(spec.name)
        objects = [
            api_object(
                "v1",
                "ServiceAccount",
                metadata(account, labels),
                {"automountServiceAccountToken": False},
            )
        ]
        app = _ServeAppFiles()
        api_key = requires_api_key(route)
        if spec.on_neuron or api_key:
            code = shipped.shipped_code(
                spec, labels, SERVE_APP_MODULES, package=shipped.SHIPPED_PACKAGE
            )
            objects.append(code.config_map)
            app = _ServeAppFiles(
                volumes=(code.volume,),
                mounts=(code.mount,),
                env=code.env,
                secret_env=(
                    (
                        pod.secret_env(
                            API_KEY_ENV,
                            secret=API_KEY_SECRET_NEED.name,
                            key=API_KEY_SECRET_NEED.key,
                        ),
                    )
                    if api_key
                    else ()
                ),
                annotations=(
                    *code.annotations,
                    *(
                        ((KEEP_ALIVE_ANNOTATION, str(keep_alive_seconds(route))),)
                        if route is not None
                        else ()
                    ),
                ),
            )
        elif route is not None:
            app = _ServeAppFiles(
                annotations=((KEEP_ALIVE_ANNOTATION, str(keep_alive_seconds(route))),)
            )
        worker = pod_resources(spec.instance, spec.replicas_per_node)
        head_pod = _head_pod(spec, placement, context, app, account)
        worker_pod = _worker_pod(spec, placement, context, app, account, weights, artifacts)
        autoscaler_resources = pod.resources({"cpu": _AUTOSCALER_CPU, "memory": _AUTOSCALER_MEMORY})
        cluster_path = (f"RayService/{spec.name}", "spec", "rayClusterConfig")
        ray_service_spec = {
            "upgradeStrategy": {"type": "NewCluster"},
            "excludeHeadPodFromServeSvc": spec.scaling.min_replicas > 0,
            "serveConfigV2": dump_yaml([engine.serve_config(spec, route)]),
            "rayClusterConfig": {
                "rayVersion": RAY_VERSION,
                "authOptions": dict(_AUTH_OPTIONS),
                "enableInTreeAutoscaling": True,
                "autoscalerOptions": {
                    "version": "v2",
                    "idleTimeoutSeconds": _IDLE_TIMEOUT_S,
                    "upscalingMode": _UPSCALING_MODE,
                    "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
                    "resources": autoscaler_resources,
                    "securityContext": pod.RAY_SECURITY,
                },
                "headGroupSpec": {
                    "rayStartParams": {
                        # Replicas and their routers never run on the head.
                        "num-cpus": "0",
                        "num-gpus": "0",
                        "dashboard-host": "0.0.0.0",
                        "object-store-memory": _object_store_bytes(_HEAD_MEMORY_MIB),
                    },
                    # Evicting the head restarts every replica of the cluster.
                    "template": _template(
                        spec, HEAD_COMPONENT, head_pod, app, pod.do_not_disrupt(None)
                    ),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": placement.workers.name,
                        "replicas": spec.scaling.min_replicas,
                        "minReplicas": spec.scaling.min_replicas,
                        "maxReplicas": spec.scaling.max_replicas,
                        # CPUs, GPUs and neuron_cores come from the container limits.
                        "rayStartParams": {
                            "object-store-memory": _object_store_bytes(worker.memory_mib),
                        },
                        # A worker is left alone while its replica may still be loading.
                        "template": _template(
                            spec,
                            WORKER_COMPONENT,
                            worker_pod,
                            app,
                            pod.do_not_disrupt(rollout_seconds(spec)),
                        ),
                    }
                ],
            },
        }
        objects.append(
            api_object(
                RAY_API_VERSION,
                "RayService",
                metadata(
                    spec.name,
                    labels,
                    annotations={
                        INITIALIZING_TIMEOUT_ANNOTATION: f"{math.ceil(rollout_seconds(spec) / 60)}m"
                    },
                ),
                {"spec": ray_service_spec},
                canonical_order=False,
            )
        )
        super().__init__(
            scope,
            spec,
            COMPONENT,
            objects,
            PlatformNeeds(
                namespaces=(INFERENCE_NAMESPACE,),
                custom_resources=(names.RAYSERVICE_CRD,),
                secrets=(API_KEY_SECRET_NEED,) if api_key else (),
                pods=(
                    pod.scheduling_need(
                        (*cluster_path, "headGroupSpec", "template"),
                        placement.head,
                        head_pod,
                        # KubeRay adds the autoscaler to the head pod.
                        sidecars=({"resources": autoscaler_resources},),
                    ),
                    pod.scheduling_need(
                        (*cluster_path, "workerGroupSpecs", 0, "template"),
                        placement.workers,
                        worker_pod,
                        per_node=spec.replicas_per_node,
                    ),
                ),
            ),
        )


def _template(
    spec: ModelDeploymentSpec,
    component: str,
    pod_spec: pod.Json,
    app: _ServeAppFiles,
    annotations: dict[str, str],
) -> pod.Json:
    meta: pod.Json = {
        "labels": object_labels(spec, component),
        "annotations": {**dict(app.annotations), **annotations},
    }
    return {"metadata": meta, "spec": pod_spec}


def _identity(service_account: str, *, api_token: bool) -> pod.Json:
    """Pod-level settings shared by head and workers: identity and user."""
    return {
        "serviceAccountName": service_account,
        "automountServiceAccountToken": api_token,
        "securityContext": pod.RAY_POD_SECURITY,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
    }


def _head_pod(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    app: _ServeAppFiles,
    service_account: str,
) -> pod.Json:
    container = {
        "name": HEAD_COMPONENT,
        "image": context.neuron_ray_image if spec.on_neuron else RAY_HEAD_GPU_IMAGE,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "ports": _ports(_HEAD_PORTS),
        "env": [*pod.env({"RAY_USAGE_STATS_ENABLED": "0", **dict(app.env)}), *app.secret_env],
        "resources": pod.resources({"cpu": _HEAD_CPU, "memory": f"{_HEAD_MEMORY_MIB}Mi"}),
        "securityContext": pod.RAY_SECURITY,
        "volumeMounts": [pod.mount("shm", "/dev/shm"), *app.mounts],
    }
    return {
        # The autoscaler sidecar talks to the Kubernetes API with this pod's token.
        **_identity(service_account, api_token=True),
        **pod.placement(placement.head),
        "containers": [container],
        "volumes": [_shm_volume(_HEAD_MEMORY_MIB), *app.volumes],
    }


def _worker_pod(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    app: _ServeAppFiles,
    service_account: str,
    weights: MountpointVolume,
    artifacts: MountpointVolume | None,
) -> pod.Json:
    worker = pod_resources(spec.instance, spec.replicas_per_node)
    image = context.neuron_ray_image if spec.on_neuron else RAY_LLM_GPU_IMAGE
    env = {
        "RAY_USAGE_STATS_ENABLED": "0",
        **dict(app.env),
        # Weights come from the model bucket only; never reach out to the Hugging Face Hub.
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    mounts = [
        pod.mount("shm", "/dev/shm"),
        pod.mount(WEIGHTS_ROLE, MODEL_MOUNT_PATH, read_only=True),
        *app.mounts,
    ]
    volumes = [
        _shm_volume(worker.memory_mib),
        pod.claim_volume(WEIGHTS_ROLE, weights.claim_name),
        *app.volumes,
    ]
    if spec.on_neuron:
        env["NEURON_COMPILED_ARTIFACTS"] = compiled_artifacts_path(spec)
    if artifacts is not None:
        mounts.append(pod.mount(ARTIFACTS_ROLE, ARTIFACTS_MOUNT_PATH, read_only=True))
        volumes.append(pod.claim_volume(ARTIFACTS_ROLE, artifacts.claim_name))
    container = {
        "name": WORKER_COMPONENT,
        "image": image,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "ports": _ports((_METRICS_PORT,)),
        "env": [*pod.env(env), *app.secret_env],
        "resources": pod.resources(
            {"cpu": worker.cpu, "memory": worker.memory, **pod.accelerator_resource(spec)}
        ),
        "securityContext": pod.RAY_SECURITY,
        "volumeMounts": mounts,
    }
    worker_pod: pod.Json = {
        **_identity(service_account, api_token=False),
        **pod.placement(placement.workers, spec),
    }
    if artifacts is not None and gates_on_compiled_artifacts(spec):
        # A worker must not start a replica on an incomplete artifact set; KubeRay adds
        # its own init container (wait for the GCS) after this one.
        worker_pod["initContainers"] = [
            pod.artifacts_gate(
                spec, image=image, bucket_name=context.bucket_name, security=pod.RAY_SECURITY
            )
        ]
    worker_pod["containers"] = [container]
    worker_pod["volumes"] = volumes
    return worker_pod


def _ports(ports: tuple[tuple[str, int], ...]) -> list[pod.Json]:
    return [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports]


def _object_store_mib(memory_mib: int) -> int:
    return memory_share_mib(memory_mib, _OBJECT_STORE_FRACTION, _OBJECT_STORE_CAP_MIB)


def _object_store_bytes(memory_mib: int) -> str:
    return str(_object_store_mib(memory_mib) * 1024 * 1024)


def _shm_volume(memory_mib: int) -> pod.Json:
    size_mib = min(_object_store_mib(memory_mib) + _SHM_HEADROOM_MIB, memory_mib)
    return pod.empty_dir("shm", f"{size_mib}Mi", in_memory=True)
