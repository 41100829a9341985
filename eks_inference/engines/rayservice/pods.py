"""The pods of a RayService's Ray cluster: the CPU head and the accelerator workers.

Built by :mod:`eks_inference.charts.pod`, like every other pod of the project, for
:mod:`eks_inference.engines.rayservice.engine`. KubeRay injects the Ray readiness and liveness
probes (raylet and Serve proxy health) and wires the ports it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from eks_inference.catalog.sizing import pod_resources
from eks_inference.charts import pod
from eks_inference.charts.artifacts_gate import gates_on_compiled_artifacts
from eks_inference.charts.context import RenderContext
from eks_inference.charts.metadata import object_labels
from eks_inference.charts.model_server import (
    ARTIFACTS_MOUNT_PATH,
    ARTIFACTS_ROLE,
    MODEL_MOUNT_PATH,
    OPENAI_PORT,
    WEIGHTS_ROLE,
    compiled_artifacts_path,
)
from eks_inference.charts.pod import memory_share_mib
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import Placement
from eks_inference.versions import RAY_HEAD_GPU_IMAGE, RAY_LLM_GPU_IMAGE

if TYPE_CHECKING:
    from eks_inference.charts.mountpoint import MountpointVolume
    from eks_inference.charts.serving import WeightsVolume

# Components of the Ray pods (their `app.kubernetes.io/component` label and container names).
HEAD_COMPONENT = "ray-head"
WORKER_COMPONENT = "ray-worker"
# Head and workers: Kubernetes' default grace, written out because the load balancer drains a
# Ray target for as long (eks_inference.charts.ingress). Ray Serve drains a node's proxy
# before the autoscaler removes its pod, so requests have left it by then.
TERMINATION_GRACE_S = 30
# The head runs GCS, the Serve controller and proxy, the dashboard and (as a sidecar) the
# autoscaler, but no replicas (num-cpus 0): 2 vCPUs and 8 GiB, which leave room for the
# system add-ons even on a 4-vCPU, 16-GiB system node.
_HEAD_CPU = "2"
HEAD_MEMORY_MIB = 8 * 1024
# Ray's object store lives in /dev/shm. Serving passes small objects (requests, tokens), so it
# gets a quarter of a pod's memory but at most 16 GiB, leaving the rest to the engine's host
# buffers; /dev/shm is 2 GiB larger for vLLM's engine processes and NCCL, which also use it.
_OBJECT_STORE_FRACTION = 0.25
_OBJECT_STORE_CAP_MIB = 16 * 1024
_SHM_HEADROOM_MIB = 2 * 1024
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


@dataclass(frozen=True)
class ServeAppFiles:
    """What head and worker pods need to import and run the Serve application.

    Nothing for Ray Serve LLM's own application on GPUs; the project's modules
    (:data:`SERVE_APP_MODULES`) when the application is the Neuron one or requires the API key.
    """

    volumes: tuple[pod.Json, ...] = ()
    mounts: tuple[pod.Json, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[pod.Json, ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()


def template(
    spec: ModelDeploymentSpec,
    component: str,
    pod_spec: pod.Json,
    app: ServeAppFiles,
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


def head_pod(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    app: ServeAppFiles,
    service_account: str,
) -> pod.Json:
    container = {
        "name": HEAD_COMPONENT,
        "image": context.neuron_ray_image if spec.on_neuron else RAY_HEAD_GPU_IMAGE,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "ports": _container_ports(_HEAD_PORTS),
        "env": [*pod.env({"RAY_USAGE_STATS_ENABLED": "0", **dict(app.env)}), *app.secret_env],
        "resources": pod.resources({"cpu": _HEAD_CPU, "memory": f"{HEAD_MEMORY_MIB}Mi"}),
        "securityContext": pod.RAY_SECURITY,
        "volumeMounts": [pod.mount("shm", "/dev/shm"), *app.mounts],
    }
    return {
        # The autoscaler sidecar talks to the Kubernetes API with this pod's token.
        **_identity(service_account, api_token=True),
        **pod.placement(placement.head),
        "containers": [container],
        "volumes": [_shm_volume(HEAD_MEMORY_MIB), *app.volumes],
    }


def worker_pod(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    app: ServeAppFiles,
    service_account: str,
    weights: WeightsVolume,
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
        "ports": _container_ports((_METRICS_PORT,)),
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


def _container_ports(ports: tuple[tuple[str, int], ...]) -> list[pod.Json]:
    return [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports]


def _object_store_mib(memory_mib: int) -> int:
    return memory_share_mib(memory_mib, _OBJECT_STORE_FRACTION, _OBJECT_STORE_CAP_MIB)


def object_store_bytes(memory_mib: int) -> str:
    return str(_object_store_mib(memory_mib) * 1024 * 1024)


def _shm_volume(memory_mib: int) -> pod.Json:
    size_mib = min(_object_store_mib(memory_mib) + _SHM_HEADROOM_MIB, memory_mib)
    return pod.empty_dir("shm", f"{size_mib}Mi", in_memory=True)
