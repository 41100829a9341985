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
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from eks_inference import names
from eks_inference.charts import engine
from eks_inference.charts.common import (
    ARTIFACTS_GATE_CONTAINER,
    ARTIFACTS_GATE_CPU_MILLIS,
    ARTIFACTS_GATE_MEMORY_MIB,
    ARTIFACTS_MOUNT_PATH,
    ARTIFACTS_ROLE,
    MODEL_MOUNT_PATH,
    OPENAI_PORT,
    RAY_GID,
    RAY_UID,
    WEIGHTS_ROLE,
    DeploymentChart,
    RenderContext,
    artifacts_gate_command,
    compiled_artifacts_path,
    dump_yaml,
    gates_on_compiled_artifacts,
    memory_share_mib,
    metadata,
    object_labels,
    rollout_seconds,
)
from eks_inference.charts.mountpoint import MountpointVolume
from eks_inference.node_pools import NodePool
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
    # Ray needs no privileges or capabilities. The root filesystem stays writable: Ray writes
    # sessions, logs and spilled objects under /tmp/ray and runtime files under its home, all
    # owned by the image's user.
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


@dataclass(frozen=True)
class _ServeAppFiles:
    """What head and worker pods need to import the Serve application (nothing on GPUs)."""

    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()


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
        # Read from the object once; head and worker pods both name it.
        self._service_account_name = self.service_account.name
        self.serve_app: kplus.ConfigMap | None = None
        app = _ServeAppFiles()
        if spec.on_neuron:
            source = neuron_app_source()
            self.serve_app = kplus.ConfigMap(
                self,
                "serve-app",
                metadata=metadata(f"{spec.name}-serve-app"),
                data={SERVE_APP_FILE: source},
            )
            app = _ServeAppFiles(
                volumes=(
                    {
                        "name": "serve-app",
                        "configMap": {
                            "name": self.serve_app.name,
                            "items": [{"key": SERVE_APP_FILE, "path": SERVE_APP_FILE}],
                        },
                    },
                ),
                mounts=({"name": "serve-app", "mountPath": SERVE_APP_PATH, "readOnly": True},),
                env=(("PYTHONPATH", SERVE_APP_PATH),),
                annotations=(
                    (SERVE_APP_HASH_ANNOTATION, hashlib.sha256(source.encode()).hexdigest()),
                ),
            )

        self.ray_service = cdk8s.ApiObject(
            self,
            "ray-service",
            api_version="ray.io/v1",
            kind="RayService",
            metadata=cdk8s.ApiObjectMetadata(
                name=spec.name,
                namespace=names.INFERENCE_NAMESPACE,
                annotations={
                    INITIALIZING_TIMEOUT_ANNOTATION: f"{math.ceil(rollout_seconds(spec) / 60)}m"
                },
            ),
        )
        worker = pod_resources(spec.instance, spec.replicas_per_node)
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
                    "template": self._template(
                        spec, "ray-head", self._head_pod(spec, placement, context, app), app
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
                        "template": self._template(
                            spec,
                            "ray-worker",
                            self._worker_pod(spec, placement, context, app, weights, artifacts),
                            app,
                        ),
                    }
                ],
            },
        }
        self.ray_service.add_json_patch(cdk8s.JsonPatch.add("/spec", ray_service_spec))

    @staticmethod
    def _template(
        spec: ModelDeploymentSpec, component: str, pod: dict[str, Any], app: _ServeAppFiles
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"labels": object_labels(spec, component)}
        if app.annotations:
            meta["annotations"] = dict(app.annotations)
        return {"metadata": meta, "spec": pod}

    def _pod(self, pool: NodePool, *, api_token: bool) -> dict[str, Any]:
        """Pod-level settings shared by head and workers: identity, user and placement."""
        pod: dict[str, Any] = {
            "serviceAccountName": self._service_account_name,
            "automountServiceAccountToken": api_token,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RAY_UID,
                "runAsGroup": RAY_GID,
                "fsGroup": RAY_GID,
            },
            "nodeSelector": pool.node_selector(),
        }
        if pool.taints:
            pod["tolerations"] = pool.tolerations()
        return pod

    def _head_pod(
        self,
        spec: ModelDeploymentSpec,
        placement: Placement,
        context: RenderContext,
        app: _ServeAppFiles,
    ) -> dict[str, Any]:
        container = {
            "name": "ray-head",
            "image": context.neuron_ray_image if spec.on_neuron else RAY_HEAD_GPU_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in _HEAD_PORTS],
            "env": _env({"RAY_USAGE_STATS_ENABLED": "0", **dict(app.env)}),
            "resources": _resources(_HEAD_CPU, f"{_HEAD_MEMORY_MIB}Mi"),
            "securityContext": _container_security(),
            "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, *app.mounts],
        }
        return {
            # The autoscaler sidecar talks to the Kubernetes API with this pod's token.
            **self._pod(placement.head, api_token=True),
            "containers": [container],
            "volumes": [_shm_volume(_HEAD_MEMORY_MIB), *app.volumes],
        }

    def _worker_pod(
        self,
        spec: ModelDeploymentSpec,
        placement: Placement,
        context: RenderContext,
        app: _ServeAppFiles,
        weights: MountpointVolume,
        artifacts: MountpointVolume | None,
    ) -> dict[str, Any]:
        worker = pod_resources(spec.instance, spec.replicas_per_node)
        accelerator = names.NEURONCORE_RESOURCE if spec.on_neuron else names.NVIDIA_GPU_RESOURCE
        env = {
            "RAY_USAGE_STATS_ENABLED": "0",
            **dict(app.env),
            # Weights come from the model bucket only; never reach out to the Hugging Face Hub.
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        mounts: list[dict[str, Any]] = [
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": WEIGHTS_ROLE, "mountPath": MODEL_MOUNT_PATH, "readOnly": True},
            *app.mounts,
        ]
        volumes: list[dict[str, Any]] = [
            _shm_volume(worker.memory_mib),
            _claim_volume(WEIGHTS_ROLE, weights),
            *app.volumes,
        ]
        if spec.on_neuron:
            env["NEURON_COMPILED_ARTIFACTS"] = compiled_artifacts_path(spec)
        if artifacts is not None:
            mounts.append(
                {"name": ARTIFACTS_ROLE, "mountPath": ARTIFACTS_MOUNT_PATH, "readOnly": True}
            )
            volumes.append(_claim_volume(ARTIFACTS_ROLE, artifacts))
        container = {
            "name": "ray-worker",
            "image": context.neuron_ray_image if spec.on_neuron else RAY_LLM_GPU_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "env": _env(env),
            "resources": _resources(
                worker.cpu, worker.memory, {accelerator: str(spec.tensor_parallel_size)}
            ),
            "securityContext": _container_security(),
            "volumeMounts": mounts,
        }
        pod: dict[str, Any] = {**self._pod(placement.workers, api_token=False)}
        if artifacts is not None and gates_on_compiled_artifacts(spec):
            # A worker must not start a replica on an incomplete artifact set; KubeRay adds
            # its own init container (wait for the GCS) after this one.
            pod["initContainers"] = [
                {
                    "name": ARTIFACTS_GATE_CONTAINER,
                    "image": container["image"],
                    "imagePullPolicy": "IfNotPresent",
                    "command": artifacts_gate_command(spec, bucket_name=context.bucket_name),
                    "resources": _resources(
                        f"{ARTIFACTS_GATE_CPU_MILLIS}m", f"{ARTIFACTS_GATE_MEMORY_MIB}Mi"
                    ),
                    "securityContext": _container_security(),
                    "volumeMounts": [
                        {
                            "name": ARTIFACTS_ROLE,
                            "mountPath": ARTIFACTS_MOUNT_PATH,
                            "readOnly": True,
                        }
                    ],
                }
            ]
        pod["containers"] = [container]
        pod["volumes"] = volumes
        if spec.on_neuron and spec.tensor_parallel_size < spec.instance.cores:
            # Part of a node's cores: the Neuron scheduler extension assigns contiguous ones.
            pod["schedulerName"] = names.NEURON_SCHEDULER_NAME
        return pod


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
        "persistentVolumeClaim": {"claimName": volume.claim_name, "readOnly": True},
    }
