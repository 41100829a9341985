"""Standalone vLLM: a Deployment of OpenAI-compatible servers, its Service, budget and identity.

cdk8s-plus-27 builds the Deployment, Service and ServiceAccount (it wires selectors and the
service account by object), with every default that breaks a model server overridden on
purpose; what cdk8s-plus cannot express (node selector, tolerations, scheduler, device-plugin
resources) is patched onto the rendered object from the placement and the spec.
"""

from __future__ import annotations

import math

import cdk8s
import cdk8s_plus_27 as kplus
from cdk8s_plus_27 import k8s
from constructs import Construct

from eks_inference import names
from eks_inference.charts import engine, values
from eks_inference.charts.common import (
    ARTIFACTS_GATE_CONTAINER,
    ARTIFACTS_GATE_CPU_MILLIS,
    ARTIFACTS_GATE_MEMORY_MIB,
    ARTIFACTS_MOUNT_PATH,
    ARTIFACTS_ROLE,
    HEALTH_PATH,
    MODEL_MOUNT_PATH,
    OPENAI_PORT,
    WEIGHTS_ROLE,
    DeploymentChart,
    RenderContext,
    artifacts_gate_command,
    compiled_artifacts_path,
    gates_on_compiled_artifacts,
    memory_share_mib,
    metadata,
    model_load_seconds,
    object_labels,
    rollout_seconds,
)
from eks_inference.charts.mountpoint import MountpointVolume
from eks_inference.platform import Placement
from eks_inference.sizing import pod_resources
from eks_inference.spec import ModelDeploymentSpec
from eks_inference.versions import NEURON_VLLM_IMAGE, VLLM_GPU_IMAGE

CONTAINER_NAME = "vllm"
# Writable directories on a read-only root filesystem: HOME (and with it every cache vLLM,
# Hugging Face, Triton, FlashInfer and torch keep under ~/.cache) and /tmp (torch inductor,
# Neuron compiler work directories). Bounded so that a runaway cache is evicted rather than
# filling the node's disk, which three pods of an inf2.48xlarge share.
HOME_PATH = "/home/vllm"
TMP_PATH = "/tmp"
_HOME_GIB = 16
_TMP_GIB = 16
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
# generations finish within two minutes.
_PRE_STOP_SLEEP_S = 10
_TERMINATION_GRACE_S = 120


def _json_pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


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

    - **ServiceAccount** ``names.service_account_name(spec.name)``: the CDK side attaches the
      deployment's Pod Identity role (S3 read on its prefix) to exactly this name.
    - **Deployment** of ``spec.scaling.min_replicas`` pods (standalone vLLM has a fixed
      count), each one model replica on ``tensor_parallel_size`` NeuronCores or GPUs. Rolls
      one extra replica at a time and never below the current count (``maxSurge`` 1,
      ``maxUnavailable`` 0), so a rollout needs room for one more replica in the node pool.
    - **Service** ``<deployment>``: ClusterIP, OpenAI API on port 8000.
    - **PodDisruptionBudget**: one replica at a time may be evicted, so node drains proceed
      without taking the whole model down; unhealthy pods may always be evicted.

    cdk8s-plus defaults overridden here: ``runAsNonRoot`` is off because the vLLM and Neuron
    images are built to run as root (their Python environments are installed for root and
    they define no serving user), which the kubelet would refuse; privilege escalation stays
    off and the root filesystem read-only, with bounded emptyDirs for HOME and /tmp; CPU and
    memory come from the instance size with requests equal to limits (Guaranteed QoS, so the
    kubelet never evicts a loaded model first); images are pulled only if not present (the
    tags are pinned, and an inference image is tens of GiB); probes are HTTP on ``/health``,
    the startup probe sized for the model load.
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
        super().__init__(scope, spec, "vllm")
        if (weights is None) != (spec.weights.loader == "runai_streamer"):
            raise ValueError(
                f"deployment {spec.name!r} loads weights with {spec.weights.loader}: pass a "
                "weights volume exactly when the loader is mountpoint"
            )
        resources = pod_resources(spec.instance, spec.replicas_per_node)

        self.service_account = kplus.ServiceAccount(
            self,
            "service-account",
            metadata=metadata(names.service_account_name(spec.name)),
            automount_token=False,
        )

        volumes = _Volumes(self)
        home = volumes.empty_dir("home", size_gib=_HOME_GIB)
        tmp = volumes.empty_dir("tmp", size_gib=_TMP_GIB)
        shm = volumes.shared_memory(shared_memory_mib(resources.memory_mib))
        env = server_environment(spec, context)

        load_seconds = model_load_seconds(spec)
        self.deployment = kplus.Deployment(
            self,
            "deployment",
            metadata=metadata(spec.name),
            pod_metadata=cdk8s.ApiObjectMetadata(labels=object_labels(spec, "vllm")),
            replicas=spec.scaling.min_replicas,
            strategy=values.rolling_update(max_surge=1, max_unavailable=0),
            # A rollout is stuck only once a new replica has had time for a node, an image
            # pull and a model load.
            progress_deadline=values.seconds(rollout_seconds(spec)),
            service_account=self.service_account,
            automount_service_account_token=False,
            security_context=kplus.PodSecurityContextProps(ensure_non_root=False),
            termination_grace_period=values.seconds(_TERMINATION_GRACE_S),
        )
        # Mounts in this order: HOME, /tmp, /dev/shm, then the read-only model volumes.
        mounts = [
            kplus.VolumeMount(path=HOME_PATH, volume=home),
            kplus.VolumeMount(path=TMP_PATH, volume=tmp),
            kplus.VolumeMount(path="/dev/shm", volume=shm),
        ]
        if weights is not None:
            weights_volume = volumes.claim(WEIGHTS_ROLE, weights)
            mounts.append(
                kplus.VolumeMount(path=MODEL_MOUNT_PATH, volume=weights_volume, read_only=True)
            )
        artifacts_volume: kplus.Volume | None = None
        if artifacts is not None:
            artifacts_volume = volumes.claim(ARTIFACTS_ROLE, artifacts)
            mounts.append(
                kplus.VolumeMount(
                    path=ARTIFACTS_MOUNT_PATH, volume=artifacts_volume, read_only=True
                )
            )
        self.deployment.add_container(
            name=CONTAINER_NAME,
            image=NEURON_VLLM_IMAGE if spec.on_neuron else VLLM_GPU_IMAGE,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            # The API server module accepts --model; `vllm serve` deprecates it.
            command=["python3", "-m", "vllm.entrypoints.openai.api_server"],
            args=engine.vllm_server_args(spec, bucket_name=context.bucket_name),
            port_number=OPENAI_PORT,
            env_variables={k: values.env_value(v) for k, v in env.items()},
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(
                    request=values.cpu_millis(resources.cpu_millis),
                    limit=values.cpu_millis(resources.cpu_millis),
                ),
                memory=kplus.MemoryResources(
                    request=values.mebibytes(resources.memory_mib),
                    limit=values.mebibytes(resources.memory_mib),
                ),
            ),
            security_context=kplus.ContainerSecurityContextProps(
                ensure_non_root=False,
                read_only_root_filesystem=True,
                allow_privilege_escalation=False,
                privileged=False,
            ),
            startup=values.http_get_probe(
                HEALTH_PATH,
                port=OPENAI_PORT,
                period_seconds=_PROBE_PERIOD_S,
                timeout_seconds=_PROBE_TIMEOUT_S,
                failure_threshold=math.ceil(load_seconds / _PROBE_PERIOD_S),
            ),
            readiness=values.http_get_probe(
                HEALTH_PATH,
                port=OPENAI_PORT,
                period_seconds=_PROBE_PERIOD_S,
                timeout_seconds=_PROBE_TIMEOUT_S,
                failure_threshold=_READINESS_FAILURES,
            ),
            liveness=values.http_get_probe(
                HEALTH_PATH,
                port=OPENAI_PORT,
                period_seconds=_LIVENESS_PERIOD_S,
                timeout_seconds=_LIVENESS_TIMEOUT_S,
                failure_threshold=_LIVENESS_FAILURES,
            ),
            lifecycle=kplus.ContainerLifecycle(
                pre_stop=values.command_handler("sleep", str(_PRE_STOP_SLEEP_S))
            ),
            volume_mounts=mounts,
        )
        if artifacts_volume is not None and gates_on_compiled_artifacts(spec):
            self._add_artifacts_gate(spec, context, artifacts_volume)

        self._place(spec, placement)

        self.service = kplus.Service(
            self,
            "service",
            metadata=metadata(spec.name),
            type=kplus.ServiceType.CLUSTER_IP,
            selector=self.deployment,
            ports=[kplus.ServicePort(name="http", port=OPENAI_PORT, target_port=OPENAI_PORT)],
        )
        self.disruption_budget = k8s.KubePodDisruptionBudget(
            self,
            "disruption-budget",
            metadata=k8s.ObjectMeta(name=spec.name, namespace=names.INFERENCE_NAMESPACE),
            spec=k8s.PodDisruptionBudgetSpec(
                max_unavailable=values.int_or_string(1),
                selector=k8s.LabelSelector(match_labels=self.deployment.match_labels),
                unhealthy_pod_eviction_policy="AlwaysAllow",
            ),
        )

    def _add_artifacts_gate(
        self, spec: ModelDeploymentSpec, context: RenderContext, artifacts: kplus.Volume
    ) -> None:
        """An init container that fails until the artifact set's completion marker exists.

        Without it, a server whose compile job has not finished (or failed half-way) would
        find a partial set, fail to load it and, being unable to write to the read-only
        artifacts volume, never serve. See :func:`artifacts_gate_command`.
        """
        self.deployment.add_init_container(
            name=ARTIFACTS_GATE_CONTAINER,
            image=NEURON_VLLM_IMAGE,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            command=artifacts_gate_command(spec, bucket_name=context.bucket_name),
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(
                    request=values.cpu_millis(ARTIFACTS_GATE_CPU_MILLIS),
                    limit=values.cpu_millis(ARTIFACTS_GATE_CPU_MILLIS),
                ),
                memory=kplus.MemoryResources(
                    request=values.mebibytes(ARTIFACTS_GATE_MEMORY_MIB),
                    limit=values.mebibytes(ARTIFACTS_GATE_MEMORY_MIB),
                ),
            ),
            security_context=kplus.ContainerSecurityContextProps(
                ensure_non_root=False,
                read_only_root_filesystem=True,
                allow_privilege_escalation=False,
                privileged=False,
            ),
            volume_mounts=[
                kplus.VolumeMount(path=ARTIFACTS_MOUNT_PATH, volume=artifacts, read_only=True)
            ],
        )

    def _place(self, spec: ModelDeploymentSpec, placement: Placement) -> None:
        """Patch what cdk8s-plus cannot express: pool, scheduler and device-plugin resources.

        The node selector and tolerations are copied from the pool (cdk8s-plus only writes
        node affinity), so the pod selects exactly the labels the node group carries and
        tolerates exactly its taints. On Neuron, a pod that takes part of a node's cores goes
        to the Neuron scheduler extension, which assigns contiguous cores, as tensor
        parallelism over NeuronLink needs.
        """
        pool = placement.workers
        pod = "/spec/template/spec"
        patches = [values.json_patch_add(f"{pod}/nodeSelector", pool.node_selector())]
        if pool.taints:
            patches.append(values.json_patch_add(f"{pod}/tolerations", pool.tolerations()))
        resource = names.NEURONCORE_RESOURCE if spec.on_neuron else names.NVIDIA_GPU_RESOURCE
        for side in ("requests", "limits"):
            # The typed Deployment serializes resource amounts from Quantity objects after
            # patching, so the patched amount must be one (a plain string renders as null).
            patches.append(
                values.quantity_patch_add(
                    f"{pod}/containers/0/resources/{side}/{_json_pointer(resource)}",
                    str(spec.tensor_parallel_size),
                )
            )
        if spec.on_neuron and spec.tensor_parallel_size < spec.instance.cores:
            patches.append(
                values.json_patch_add(f"{pod}/schedulerName", names.NEURON_SCHEDULER_NAME)
            )
        # One call for all of them, applied in list order.
        cdk8s.ApiObject.of(self.deployment).add_json_patch(*patches)


class _Volumes:
    """Pod volumes of the vLLM chart, each named once and added to the pod where it is mounted."""

    def __init__(self, scope: Construct) -> None:
        self._scope = scope

    def empty_dir(self, name: str, *, size_gib: int) -> kplus.Volume:
        return kplus.Volume.from_empty_dir(
            self._scope, f"{name}-volume", name, size_limit=values.gibibytes(size_gib)
        )

    def shared_memory(self, size_mib: int) -> kplus.Volume:
        return kplus.Volume.from_empty_dir(
            self._scope,
            "shm-volume",
            "shm",
            medium=kplus.EmptyDirMedium.MEMORY,
            size_limit=values.mebibytes(size_mib),
        )

    def claim(self, name: str, volume: MountpointVolume) -> kplus.Volume:
        claim = kplus.PersistentVolumeClaim.from_claim_name(
            self._scope, f"{name}-claim", volume.claim_name
        )
        return kplus.Volume.from_persistent_volume_claim(
            self._scope, f"{name}-volume", claim, name=name, read_only=True
        )
