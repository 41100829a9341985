"""The one way to build a pod: containers, resources, security, probes, volumes and placement.

The vLLM Deployment, the RayService head and workers and the Neuron compile Job are all built
from these functions, as plain Kubernetes JSON (``dict``), so a decision such as "requests equal
limits" or "the artifacts gate checks one file" is written once and every pod gets it the same
way. Nothing here calls into cdk8s: building a pod costs no round trip to Node.js.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eks_inference import names
from eks_inference.charts.artifacts_gate import (
    ARTIFACTS_GATE_CONTAINER,
    ARTIFACTS_GATE_CPU_MILLIS,
    ARTIFACTS_GATE_MEMORY_MIB,
    artifacts_gate_command,
)
from eks_inference.charts.contract import PodNeed, Toleration
from eks_inference.charts.model_server import ARTIFACTS_MOUNT_PATH, ARTIFACTS_ROLE
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.node_pools import NodePool

Json = dict[str, Any]
"""A Kubernetes object or part of one, as the API's JSON."""

# The confinement every container of the platform gets, whichever user it runs as: every
# Linux capability dropped, no privilege escalation (setuid binaries, file capabilities), and
# the container runtime's default seccomp profile, which the kubelet does not apply unless
# asked. No model server, compile or upload needs a capability: they open devices and files
# they own, bind an unprivileged port and talk TCP.
_CONFINED: Json = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "seccompProfile": {"type": "RuntimeDefault"},
}
# Images that run as root, each for a reason of its own:
#
# * ``vllm/vllm-openai`` (GPU server): its only user is root, and torch looks up the current
#   user in the image's user database when it is imported (its compile caches are named after
#   it), which has no entry for any other uid. LMCache's image of the server
#   (``lmcache/vllm-openai``) and the AWS Deep Learning Containers image of it for EFA groups
#   are built on it and run as the same root.
# * The Neuron vLLM DLC (Neuron server and compile job): it defines no user but root, for
#   which its Python environment and Neuron tools are set up.
# * The AWS CLI (the compile job's uploader): it shares its pod with the compile container,
#   which runs as root, so the Pod Identity token the kubelet projects into the pod is root's
#   (mode 0600) and no other uid could read it to sign the upload.
#
# Being root without capabilities, they can still read and write what root owns (their own
# files, the emptyDirs) but nothing that takes a capability, and the root filesystem is
# read-only, with emptyDirs wherever they write.
ROOT_IMAGE_SECURITY: Json = {
    **_CONFINED,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": False,
}
ROOT_IMAGE_POD_SECURITY: Json = {
    "runAsNonRoot": False,
    "seccompProfile": {"type": "RuntimeDefault"},
}
# The Ray images' user ``ray`` and its group ``users``: the Mountpoint volumes Ray pods read
# are mounted with these ids, and emptyDirs are group-owned by the group.
RAY_UID = 1000
RAY_GID = 100
# The Ray images (``rayproject/ray-llm`` on GPUs, the platform's Neuron Ray image) define the
# user ``ray`` (uid 1000) and install Ray and its Python for it, so Ray runs as that user. The
# root filesystem stays writable: Ray writes sessions, logs and spilled objects under /tmp/ray
# and runtime files under its home, all owned by the image's user.
RAY_SECURITY: Json = {
    **_CONFINED,
    "runAsNonRoot": True,
    "runAsUser": RAY_UID,
    "runAsGroup": RAY_GID,
}
# Pod-level identity of Ray pods: files on emptyDirs are group-owned by the Ray user's group;
# the seccomp profile covers the containers KubeRay adds (the autoscaler sidecar) as well.
RAY_POD_SECURITY: Json = {
    "runAsNonRoot": True,
    "runAsUser": RAY_UID,
    "runAsGroup": RAY_GID,
    "fsGroup": RAY_GID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
# A node agent that reads the accelerators through the host's driver (neuron-monitor reads
# every Neuron device and runtime of the node): Neuron's own DaemonSet runs it privileged, the
# only way its image can open the devices. No escalation beyond that, and a read-only root.
PRIVILEGED_NODE_AGENT_SECURITY: Json = {
    "privileged": True,
    "readOnlyRootFilesystem": True,
}
# Tags are pinned and inference images are tens of GiB: pull only what the node lacks.
PULL_IF_NOT_PRESENT = "IfNotPresent"


def resources(
    amounts: Mapping[str, str], *, requested_only: Mapping[str, str] | None = None
) -> Json:
    """Requests equal to limits (Guaranteed QoS), plus amounts that are only requested.

    A model server or compile the kubelet evicted or throttled under pressure would lose
    minutes to hours of loading; Guaranteed pods are evicted last. KubeRay also reads Ray's
    CPU, memory, GPU and ``neuron_cores`` counts from the limits. ``requested_only`` amounts
    (ephemeral storage) reserve capacity without a limit.
    """
    return {
        "requests": {**amounts, **(requested_only or {})},
        "limits": dict(amounts),
    }


def accelerator_resource(spec: ModelDeploymentSpec) -> dict[str, str]:
    """The device-plugin resource of one replica: TP NeuronCores or TP GPUs."""
    resource = names.NEURONCORE_RESOURCE if spec.on_neuron else names.NVIDIA_GPU_RESOURCE
    return {resource: str(spec.tensor_parallel_size)}


def memory_share_mib(memory_mib: int, fraction: float, cap_mib: int) -> int:
    """A share of a pod's memory in whole 256 MiB, at most ``cap_mib``."""
    return min(int(memory_mib * fraction) // 256 * 256, cap_mib)


def env(values: Mapping[str, str]) -> list[Json]:
    """Environment variables in the order given."""
    return [{"name": name, "value": value} for name, value in values.items()]


def secret_env(name: str, *, secret: str, key: str) -> Json:
    """An environment variable read from ``key`` of Secret ``secret``.

    The Secret is required (not ``optional``): a container whose Secret does not exist yet is
    not started, and the kubelet retries until it does, so a server never runs without it.
    """
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def http_probe(
    path: str, *, port: int, period_seconds: int, timeout_seconds: int, failure_threshold: int
) -> Json:
    """An HTTP GET probe."""
    return {
        "failureThreshold": failure_threshold,
        "httpGet": {"path": path, "port": port, "scheme": "HTTP"},
        "periodSeconds": period_seconds,
        "timeoutSeconds": timeout_seconds,
    }


def mount(volume: str, path: str, *, read_only: bool = False) -> Json:
    """A volume mount; read-only mounts say so."""
    mounted: Json = {"name": volume, "mountPath": path}
    if read_only:
        mounted["readOnly"] = True
    return mounted


def empty_dir(name: str, size: str, *, in_memory: bool = False) -> Json:
    """An emptyDir bounded to ``size``: a runaway cache is evicted, never fills the node."""
    source: Json = {"medium": "Memory"} if in_memory else {}
    source["sizeLimit"] = size
    return {"name": name, "emptyDir": source}


def claim_volume(name: str, claim_name: str) -> Json:
    """A read-only volume of the PersistentVolumeClaim ``claim_name``."""
    return {"name": name, "persistentVolumeClaim": {"claimName": claim_name, "readOnly": True}}


def placement(pool: NodePool, spec: ModelDeploymentSpec | None = None) -> Json:
    """Node selector and tolerations of ``pool``; for an accelerator pod, its scheduler.

    The selector and tolerations are the pool's own (the labels its nodes carry, exactly the
    taints they have), so a pod cannot select a label no node has. A Neuron pod that takes
    part of a node's cores (``spec`` given, TP below the node's cores) goes to the Neuron
    scheduler extension, which assigns contiguous cores as tensor parallelism over
    NeuronLink needs.
    """
    placed: Json = {"nodeSelector": pool.node_selector()}
    if pool.taints:
        placed["tolerations"] = pool.tolerations()
    if spec is not None and spec.on_neuron and spec.tensor_parallel_size < spec.instance.cores:
        placed["schedulerName"] = names.NEURON_SCHEDULER_NAME
    return placed


def do_not_disrupt(seconds: int | None) -> dict[str, str]:
    """The pod annotation that keeps Karpenter from voluntarily moving the pod.

    For ``seconds`` after the pod started (a Go duration; Karpenter counts from the pod's
    start time, before its images are pulled), or, with ``None``, for as long as it runs.
    Karpenter still drains the node for spot interruptions and, after its NodePool's
    ``terminationGracePeriod``, for drift and expiry; without Karpenter the annotation is
    read by nothing.
    """
    return {names.KARPENTER_DO_NOT_DISRUPT_ANNOTATION: "true" if seconds is None else f"{seconds}s"}


def scheduling_need(
    path: Sequence[str | int],
    pool: NodePool,
    pod_spec: Json,
    *,
    sidecars: Sequence[Json] = (),
    per_node: int = 1,
) -> PodNeed:
    """What a node must offer to run ``pod_spec``, which is placed on ``pool``.

    Read from the pod as rendered, so the need is what the pod asks for; ``sidecars`` are
    containers an operator adds to the pod at runtime (KubeRay's autoscaler in a Ray head);
    ``per_node`` pods of it share one node.
    """
    return PodNeed(
        path=tuple(path),
        pool=pool.name,
        node_selector=tuple(sorted(pod_spec.get("nodeSelector", {}).items())),
        tolerations=tuple(
            Toleration(
                key=t.get("key"),
                operator=t.get("operator", "Equal"),
                value=t.get("value"),
                effect=t.get("effect"),
            )
            for t in pod_spec.get("tolerations", [])
        ),
        requests=tuple(_requests(c) for c in (*pod_spec["containers"], *sidecars)),
        init_requests=tuple(_requests(c) for c in pod_spec.get("initContainers", [])),
        per_node=per_node,
    )


def _requests(container: Json) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(container.get("resources", {}).get("requests", {}).items()))


def artifacts_gate(
    spec: ModelDeploymentSpec, *, image: str, bucket_name: str, security: Json
) -> Json:
    """The init container that holds a Neuron server until its compiled artifacts are whole.

    Without it, a server whose compile job has not finished (or failed half-way) would find
    a partial set, fail to load it and, unable to write to the read-only artifacts volume,
    never serve. It only tests for one file (:func:`artifacts_gate_command`), so it gets a
    fixed sliver of CPU and memory (requests equal limits keep the pod Guaranteed); it runs
    the server's own image, which the node pulls anyway, as the server's user.
    """
    return {
        "name": ARTIFACTS_GATE_CONTAINER,
        "image": image,
        "imagePullPolicy": PULL_IF_NOT_PRESENT,
        "command": artifacts_gate_command(spec, bucket_name=bucket_name),
        "resources": resources(
            {"cpu": f"{ARTIFACTS_GATE_CPU_MILLIS}m", "memory": f"{ARTIFACTS_GATE_MEMORY_MIB}Mi"}
        ),
        "securityContext": dict(security),
        "volumeMounts": [mount(ARTIFACTS_ROLE, ARTIFACTS_MOUNT_PATH, read_only=True)],
    }
