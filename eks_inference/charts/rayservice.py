"""Ray Serve on KubeRay: a RayService that autoscales model replicas on queue depth.

A CPU head (GCS, Serve controller, HTTP proxy, autoscaler) and one worker group on the
accelerator pool, one Serve replica per worker pod. Serve adds replicas when ongoing requests
per replica exceed the target; the in-tree Ray autoscaler adds a worker pod for each replica
that does not fit; the Cluster Autoscaler adds a node for each pod that does not fit.

The RayService is a custom resource, so its pod templates are plain dictionaries: no
cdk8s-plus defaults to override, every field below is a decision. KubeRay injects the Ray
readiness and liveness probes (raylet and Serve proxy health) and wires the ports it needs.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from eks_inference import names
from eks_inference.charts import engine
from eks_inference.charts.common import (
    ARTIFACTS_MOUNT_PATH,
    ARTIFACTS_ROLE,
    MODEL_MOUNT_PATH,
    OPENAI_PORT,
    RAY_GID,
    RAY_UID,
    WEIGHTS_ROLE,
    DeploymentChart,
    RenderContext,
    compiled_artifacts_path,
    metadata,
    object_labels,
    rollout_seconds,
    dump_yaml,
    memory_share_mib,
)
from eks_inference.charts.mountpoint import MountpointVolume
from eks_inference.platform import Placement
from eks_inference.sizing import pod_resources
from eks_inference.spec import ModelDeploymentSpec
from eks_inference.versions import RAY_HEAD_GPU_IMAGE, RAY_LLM_GPU_IMAGE, RAY_VERSION

INITIALIZING_TIMEOUT_ANNOTATION = "ray.io/initializing-timeout"
# Hash of the Neuron application's source on the pod templates: a change of the code changes
# the cluster spec, so KubeRay rolls a new cluster instead of leaving old code running.
SERVE_APP_HASH_ANNOTATION = "eks-inference.io/serve-app-sha256"
# Where the Neuron application's ConfigMap is mounted; on PYTHONPATH in head and workers,
# so Serve imports `neuron_app` wherever it builds or runs the application.
SERVE_APP_PATH = "/opt/eks-inference/serve"
SERVE_APP_FILE = f"{engine.NEURON_APP_MODULE}.py"

# The head runs GCS, the Serve controller and proxy, the dashboard and (as a sidecar) the
# autoscaler, but no replicas (num-cpus 0): 2 vCPUs and 8 GiB leave a 4-vCPU system node room
# for add-ons.
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
_HEAD_PORTS = (
    ("gcs-server", 6379),
    ("dashboard", 8265),
    ("client", 10001),
    ("serve", OPENAI_PORT),
    ("metrics", 8080),
)


def neuron_app_source() -> str:
    """Source of the Neuron Serve application, read from the installed package."""
    return (
        resources.files("eks_inference.serve").joinpath(SERVE_APP_FILE).read_text(encoding="utf-8")
    )


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _container_security() -> dict[str, Any]:
    # Ray needs no privileges or capabilities; the Ray images' user owns everything it writes
    # (/tmp/ray and its home), so the root filesystem stays writable.
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": RAY_UID,
        "runAsGroup": RAY_GID,
    }


def _resources(cpu: str, memory: str, extended: dict[str, str] | None = None) -> dict[str, Any]:
    # Requests equal limits: Guaranteed QoS, and KubeRay reads Ray's CPU, memory, GPU and
    # neuron_cores counts from the limits.
    amounts = {"cpu": cpu, "memory": memory, **(extended or {})}
    return {"requests": dict(amounts), "limits": dict(amounts)}


class RayServiceChart(DeploymentChart):
    """A RayService serving one model through Ray Serve, with its ServiceAccount.

    Objects: the ServiceAccount ``names.service_account_name(spec.name)`` (head and workers;
    the CDK side attaches the Pod Identity role to it, and KubeRay binds the autoscaler's
    role to it), on Inferentia2 a ConfigMap holding the Neuron Serve application, and the
    RayService ``<deployment>``, served by KubeRay's ``<deployment>-serve-svc`` on port 8000.

    Decisions:

    - Head on the CPU pool (``placement.head``) with ``num-cpus``/``num-gpus`` 0 and no
      accelerator resources; the only pod with a service-account token, for the autoscaler.
    - One worker group on ``placement.workers`` with ``minReplicas``/``maxReplicas`` from the
      spec's scaling; a worker requests exactly TP NeuronCores or GPUs, so one Serve replica
      fills it, and CPU/memory are the node's share per replica.
    - In-tree autoscaling (v2) with a 5-minute idle timeout and unthrottled upscaling.
    - ``upgradeStrategy: NewCluster``: a changed cluster spec starts a new cluster and moves
      traffic when it serves, so upgrades have no downtime but need capacity for a second
      set of replicas while both run.
    - ``ray.io/initializing-timeout`` is the rollout budget (node launch, image pull, model
      load): past it KubeRay marks the service failed rather than waiting forever.
    - With ``min_replicas`` >= 1 the head is left out of the serve Service, so requests go
      straight to worker proxies; with 0 it stays in, since its proxy is what receives the
      first request and triggers a scale-up from zero.
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
    ) -> None:
        super().__init__(scope, spec, "rayservice")
        if weights is None:
            raise ValueError(
                f"deployment {spec.name!r}: Ray Serve workers read weights from a Mountpoint "
                "volume; pass one"
            )
        self.service_account = kplus.ServiceAccount(
            self,
            "service-account",
            metadata=metadata(names.service_account_name(spec.name)),
            automount_token=False,
        )
        self.serve_app: kplus.ConfigMap | None = None
        app_volumes: list[dict[str, Any]] = []
        app_mounts: list[dict[str, Any]] = []
        app_env: dict[str, str] = {}
        pod_annotations: dict[str, str] = {}
        if spec.on_neuron:
            source = neuron_app_source()
            self.serve_app = kplus.ConfigMap(
                self,
                "serve-app",
                metadata=metadata(f"{spec.name}-serve-app"),
                data={SERVE_APP_FILE: source},
            )
            app_volumes.append(
                {
                    "name": "serve-app",
                    "configMap": {
                        "name": self.serve_app.name,
                        "items": [{"key": SERVE_APP_FILE, "path": SERVE_APP_FILE}],
                    },
                }
            )
            app_mounts.append({"name": "serve-app", "mountPath": SERVE_APP_PATH, "readOnly": True})
            app_env["PYTHONPATH"] = SERVE_APP_PATH
            pod_annotations[SERVE_APP_HASH_ANNOTATION] = hashlib.sha256(source.encode()).hexdigest()

        head_image = context.neuron_ray_image if spec.on_neuron else RAY_HEAD_GPU_IMAGE
        worker_image = context.neuron_ray_image if spec.on_neuron else RAY_LLM_GPU_IMAGE
        common_env = {"RAY_USAGE_STATS_ENABLED": "0", **app_env}
        pod_context = {
            "serviceAccountName": self.service_account.name,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RAY_UID,
                "runAsGroup": RAY_GID,
                "fsGroup": RAY_GID,
            },
        }

        head_pod: dict[str, Any] = {
            **pod_context,
            # The autoscaler sidecar talks to the Kubernetes API with this token.
            "automountServiceAccountToken": True,
            "nodeSelector": placement.head.node_selector(),
            "containers": [
                {
                    "name": "ray-head",
                    "image": head_image,
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [
                        {"name": n, "containerPort": p, "protocol": "TCP"} for n, p in _HEAD_PORTS
                    ],
                    "env": _env(common_env),
                    "resources": _resources(_HEAD_CPU, f"{_HEAD_MEMORY_MIB}Mi"),
                    "securityContext": _container_security(),
                    "volumeMounts": [
                        {"name": "shm", "mountPath": "/dev/shm"},
                        *app_mounts,
                    ],
                }
            ],
            "volumes": [_shm_volume(_HEAD_MEMORY_MIB), *app_volumes],
        }
        if placement.head.taints:
            head_pod["tolerations"] = placement.head.tolerations()

        worker = pod_resources(spec.instance, spec.replicas_per_node)
        accelerator = names.NEURONCORE_RESOURCE if spec.on_neuron else names.NVIDIA_GPU_RESOURCE
        worker_env = {
            **common_env,
            # Weights come from the model bucket only; never reach out to the Hugging Face Hub.
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        worker_mounts: list[dict[str, Any]] = [
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": WEIGHTS_ROLE, "mountPath": MODEL_MOUNT_PATH, "readOnly": True},
            *app_mounts,
        ]
        worker_volumes: list[dict[str, Any]] = [
            _shm_volume(worker.memory_mib),
            _claim_volume(WEIGHTS_ROLE, weights),
            *app_volumes,
        ]
        if spec.on_neuron:
            worker_env["NEURON_COMPILED_ARTIFACTS"] = compiled_artifacts_path(spec)
        if artifacts is not None:
            worker_mounts.append(
                {"name": ARTIFACTS_ROLE, "mountPath": ARTIFACTS_MOUNT_PATH, "readOnly": True}
            )
            worker_volumes.append(_claim_volume(ARTIFACTS_ROLE, artifacts))
        worker_pod: dict[str, Any] = {
            **pod_context,
            "automountServiceAccountToken": False,
            "nodeSelector": placement.workers.node_selector(),
            "containers": [
                {
                    "name": "ray-worker",
                    "image": worker_image,
                    "imagePullPolicy": "IfNotPresent",
                    "env": _env(worker_env),
                    "resources": _resources(
                        worker.cpu, worker.memory, {accelerator: str(spec.tensor_parallel_size)}
                    ),
                    "securityContext": _container_security(),
                    "volumeMounts": worker_mounts,
                }
            ],
            "volumes": worker_volumes,
        }
        if placement.workers.taints:
            worker_pod["tolerations"] = placement.workers.tolerations()
        if spec.on_neuron and spec.tensor_parallel_size < spec.instance.cores:
            # Part of a node's cores: the Neuron scheduler extension assigns contiguous ones.
            worker_pod["schedulerName"] = names.NEURON_SCHEDULER_NAME

        def template(component: str, pod: dict[str, Any]) -> dict[str, Any]:
            meta: dict[str, Any] = {"labels": object_labels(spec, component)}
            if pod_annotations:
                meta["annotations"] = dict(pod_annotations)
            return {"metadata": meta, "spec": pod}

        timeout_minutes = -(-rollout_seconds(spec) // 60)
        self.ray_service = cdk8s.ApiObject(
            self,
            "ray-service",
            api_version="ray.io/v1",
            kind="RayService",
            metadata=cdk8s.ApiObjectMetadata(
                name=spec.name,
                namespace=names.INFERENCE_NAMESPACE,
                annotations={INITIALIZING_TIMEOUT_ANNOTATION: f"{timeout_minutes}m"},
            ),
        )
        # ApiObject has no typed props for a custom resource's spec; it is added whole.
        ray_service_spec = {
            "upgradeStrategy": {"type": "NewCluster"},
            "excludeHeadPodFromServeSvc": spec.scaling.min_replicas > 0,
            "serveConfigV2": dump_yaml([engine.serve_config(spec)]),
            "rayClusterConfig": {
                "rayVersion": RAY_VERSION,
                "enableInTreeAutoscaling": True,
                "autoscalerOptions": {
                    "version": "v2",
                    "idleTimeoutSeconds": _IDLE_TIMEOUT_S,
                    "upscalingMode": _UPSCALING_MODE,
                    "imagePullPolicy": "IfNotPresent",
                    "resources": _resources(_AUTOSCALER_CPU, _AUTOSCALER_MEMORY),
                    "securityContext": _container_security(),
                },
                "headGroupSpec": {
                    "rayStartParams": {
                        # Replicas and their routers never run on the head.
                        "num-cpus": "0",
                        "num-gpus": "0",
                        "dashboard-host": "0.0.0.0",
                        "object-store-memory": _object_store_bytes(_HEAD_MEMORY_MIB),
                    },
                    "template": template("ray-head", head_pod),
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
                        "template": template("ray-worker", worker_pod),
                    }
                ],
            },
        }
        self.ray_service.add_json_patch(cdk8s.JsonPatch.add("/spec", ray_service_spec))


def _object_store_mib(memory_mib: int) -> int:
    return memory_share_mib(memory_mib, _OBJECT_STORE_FRACTION, _OBJECT_STORE_CAP_MIB)


def _object_store_bytes(memory_mib: int) -> str:
    return str(_object_store_mib(memory_mib) * 1024 * 1024)


def _shm_volume(memory_mib: int) -> dict[str, Any]:
    size_mib = min(_object_store_mib(memory_mib) + _SHM_HEADROOM_MIB, memory_mib)
    return {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{size_mib}Mi"}}


def _claim_volume(name: str, volume: MountpointVolume) -> dict[str, Any]:
    return {
        "name": name,
        "persistentVolumeClaim": {"claimName": volume.claim.name, "readOnly": True},
    }
