"""What every chart of a deployment shares: the render context, names, labels, paths and budgets.

Charts receive a validated :class:`~eks_inference.specification.deployment.ModelDeploymentSpec`, a
:class:`~eks_inference.specification.platform.Placement` and a :class:`RenderContext`. Values that
come from
outside the spec (the bucket, the region, the registry of an image the CDK app builds) arrive
in the context as strings that may be unresolved CDK tokens, so charts only ever embed them
in larger strings, never parse, hash or compare them.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from eks_inference.charts.contract import SecretNeed
from eks_inference.names import API_KEY_SECRET, API_KEY_SECRET_KEY, INFERENCE_NAMESPACE, VPC_CIDR
from eks_inference.names import COMPONENT_LABEL as COMPONENT_LABEL
from eks_inference.names import INSTANCE_LABEL as INSTANCE_LABEL
from eks_inference.output.yaml_text import WIDTH, block_yaml, scalar_tag
from eks_inference.serve.api_key_auth import API_KEY_ENV as API_KEY_ENV
from eks_inference.serve.api_key_auth import HEALTH_PATH as HEALTH_PATH
from eks_inference.serve.api_key_auth import METRICS_PATH as METRICS_PATH
from eks_inference.specification import artifacts
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.routes import Route

# The OpenAI-compatible port of vLLM and of Ray Serve's HTTP proxy alike, so a client's URL
# differs between engines only in the Service name.
OPENAI_PORT = 8000

# API_KEY_ENV holds the platform's API key in model-server containers, from the Secret the
# platform syncs (API_KEY_SECRET_NEED); it, HEALTH_PATH and METRICS_PATH, the paths the key
# check leaves open (to probes and to Prometheus), are defined by the check itself
# (eks_inference/serve/api_key_auth.py), which runs in the pods. vLLM reads the variable
# itself and the Serve applications are told its name, so
# the key never appears in a manifest, a process's arguments, a Serve config or the Ray
# dashboard.
API_KEY_SECRET_NEED = SecretNeed(
    name=API_KEY_SECRET, namespace=INFERENCE_NAMESPACE, key=API_KEY_SECRET_KEY
)
# An exposed model server keeps idle connections open this much longer than the load balancer:
# the load balancer, never the server, then closes an idle connection. A connection the server
# closed just as the load balancer reused it would fail that request with a 502.
KEEP_ALIVE_MARGIN_S = 30


def requires_api_key(route: Route | None) -> bool:
    """Whether a server exposed on ``route`` requires the platform's API key."""
    return route is not None and route.api_key


def keep_alive_seconds(route: Route) -> int:
    """Idle seconds a server exposed on ``route`` keeps a connection: past the ALB's timeout."""
    return route.idle_timeout_seconds + KEEP_ALIVE_MARGIN_S


# Roles of the Mountpoint volume charts, also the names of the pod volumes that mount them.
WEIGHTS_ROLE = "model-weights"
ARTIFACTS_ROLE = "neuron-artifacts"
# Role of the chart holding a deployment's Neuron compile job.
COMPILE_JOB_ROLE = "compile-job"

# Fixed paths inside model-server containers. The weights prefix is mounted at the model
# path, so `--model` (or the Serve app's model source) is the same for every deployment.
MODEL_MOUNT_PATH = "/mnt/model"
ARTIFACTS_MOUNT_PATH = "/mnt/neuron-artifacts"
# Without a compiled-artifacts prefix (development only) the plugin compiles into a
# writable scratch directory and keeps the result only for the life of the pod.
SCRATCH_COMPILED_ARTIFACTS_PATH = "/tmp/neuron-compiled-artifacts"

# The Ray images run as user `ray`, uid 1000 in group `users` (gid 100); the Mountpoint
# volumes Ray pods read are mounted with the same ids, and emptyDirs are group-owned by it.
RAY_UID = 1000
RAY_GID = 100

# Standard labels (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/).
PART_OF = "eks-inference"

# The init container that keeps a Neuron model server from starting on an incomplete artifact
# set. It only tests for one file, so it gets a fixed sliver of CPU and memory (requests equal
# limits, keeping the pod's Guaranteed QoS); it runs the server's own image, which the node
# pulls anyway, so the check costs no extra image.
ARTIFACTS_GATE_CONTAINER = "check-compiled-artifacts"
ARTIFACTS_GATE_CPU_MILLIS = 100
ARTIFACTS_GATE_MEMORY_MIB = 64


class MissingFileSystemError(ValueError):
    """A deployment reads FSx for Lustre, but its file system is not known when rendering."""


@dataclass(frozen=True)
class LustreMount:
    """What a PersistentVolume needs of an FSx for Lustre file system to mount it.

    ``file_system_id`` is the volume handle, ``dns_name`` and ``mount_name`` the volume
    attributes ``dnsname`` and ``mountname`` of the FSx CSI driver (its static provisioning
    example at the pinned version), ``capacity_gib`` the volume's capacity. The CDK side
    passes the tokens of the file system it creates; an imported one, plain strings.
    """

    file_system_id: str
    dns_name: str
    mount_name: str
    capacity_gib: int


@dataclass(frozen=True)
class RenderContext:
    """Values the charts need from outside a deployment spec.

    ``bucket_name`` is the model bucket, ``region`` its region (written into Mountpoint mount
    options and the Run:ai streamer's environment, so pods need no instance metadata to find
    it) and ``neuron_ray_image`` the Ray + Neuron image the CDK app builds, with its tag.
    ``vpc_cidr`` is the cluster's VPC, whose addresses the load balancer reaches the serving
    port from (default: the VPC :class:`~eks_inference.constructs.cluster.InferenceCluster`
    creates). ``file_systems`` are the FSx for Lustre file systems of the deployments that
    read their weights from one, by deployment name. The CDK constructs pass tokens here; the
    manifest writer passes plain strings.
    """

    bucket_name: str
    region: str
    neuron_ray_image: str
    vpc_cidr: str = VPC_CIDR
    file_systems: tuple[tuple[str, LustreMount], ...] = ()

    def file_system(self, deployment: str) -> LustreMount:
        """The FSx for Lustre file system of ``deployment`` (``ValueError`` when none)."""
        for name, mount in self.file_systems:
            if name == deployment:
                return mount
        raise MissingFileSystemError(
            f"deployment {deployment!r} reads its weights from an FSx for Lustre file system "
            "the stack creates, whose id is known only once it is deployed: give "
            "weights.fsx.file_system_id, dns_name and mount_name of an existing one to write "
            "its manifests, or deploy it with the CDK app"
        )


def chart_id(deployment_name: str, role: str) -> str:
    """Id of a deployment's chart with ``role``: ``<deployment>-<role>``, unique in an app."""
    return f"{deployment_name}-{role}"


def object_labels(spec: ModelDeploymentSpec, component: str) -> dict[str, str]:
    """Labels of every object (and pod) belonging to ``spec``'s ``component``."""
    return {
        INSTANCE_LABEL: spec.name,
        COMPONENT_LABEL: component,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": PART_OF,
    }


def selector_labels(spec: ModelDeploymentSpec, component: str) -> dict[str, str]:
    """The labels that pick out ``spec``'s ``component`` pods: instance and component."""
    return {INSTANCE_LABEL: spec.name, COMPONENT_LABEL: component}


def metadata(
    name: str,
    labels: Mapping[str, str],
    *,
    namespace: str | None = INFERENCE_NAMESPACE,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Object metadata with an explicit, stable name, in the inference namespace by default.

    Names are explicit rather than generated so that clients, dashboards and runbooks can rely
    on them (the vLLM Service is reachable as ``<deployment>.inference.svc:8000``). Pass
    ``namespace=None`` for cluster-scoped objects.
    """
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def api_object(
    api_version: str,
    kind: str,
    meta: Mapping[str, Any],
    body: Mapping[str, Any],
    *,
    canonical_order: bool = True,
) -> dict[str, Any]:
    """A Kubernetes object: ``apiVersion``, ``kind``, ``metadata``, then ``body``'s fields.

    With ``canonical_order`` every mapping's keys are sorted (as ``kubectl`` prints them), so
    the YAML reads the same however the object was assembled. A custom resource whose
    fields are written in a deliberate reading order (the RayService) keeps its order.
    """
    fields = _sorted_keys(body) if canonical_order else dict(body)
    return {"apiVersion": api_version, "kind": kind, "metadata": _sorted_keys(meta), **fields}


# Values that are returned as they are; checked by exact type first because the abstract
# class check below costs more than the copy, and nearly every value is one of these.
_LEAVES = frozenset({str, int, bool, float, type(None)})


def _sorted_keys(value: Any) -> Any:
    kind = type(value)
    if kind in _LEAVES:
        return value
    if kind is dict or isinstance(value, Mapping):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


# The API server refuses a request body over 3 MiB and etcd a value over 1.5 MiB; a ConfigMap's
# data may not exceed 1 MiB. Any object above 1 MiB comes from a runaway input, not a design.
MAX_OBJECT_BYTES = 1024 * 1024


def check_object_size(obj: Mapping[str, Any]) -> None:
    """Refuse an object larger than :data:`MAX_OBJECT_BYTES` as JSON, naming it."""
    # ASCII text (non-ASCII characters escaped): its length is its size in bytes.
    size = len(json.dumps(obj, separators=(",", ":")))
    if size > MAX_OBJECT_BYTES:
        meta = obj.get("metadata", {})
        raise ValueError(
            f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name')} renders to "
            f"{size:,} bytes, more than the {MAX_OBJECT_BYTES:,} bytes a Kubernetes object may "
            "hold; look for an oversized value in the deployment's spec"
        )


def compiled_artifacts_path(spec: ModelDeploymentSpec) -> str:
    """``NEURON_COMPILED_ARTIFACTS`` for a Neuron pod of ``spec``.

    With compiled artifacts, the artifacts volume mounts exactly the deployment's key
    (:func:`eks_inference.specification.artifacts.artifact_prefix`) at :data:`ARTIFACTS_MOUNT_PATH`,
    so the
    Mountpoint driver reads that key and nothing else of the artifacts tree. Without them
    (compiling at start-up, development only), a scratch directory.
    """
    return ARTIFACTS_MOUNT_PATH if spec.has_compiled_artifacts else SCRATCH_COMPILED_ARTIFACTS_PATH


def gates_on_compiled_artifacts(spec: ModelDeploymentSpec) -> bool:
    """True when ``spec``'s serving pods must wait for a complete compiled artifact set.

    That is every Neuron deployment with a compiled-artifacts prefix that may not compile at
    start-up: its pods only ever load, so an incomplete set must keep them from starting.
    """
    return spec.has_compiled_artifacts and not spec.neuron_options.allow_compile_at_startup


def compile_job_name(spec: ModelDeploymentSpec) -> str:
    """Name of the Job compiling ``spec``'s artifacts: ``<deployment>-compile-<key hash>``.

    Jobs are immutable, so the name carries a short hash of the artifact key
    (:func:`eks_inference.specification.artifacts.artifact_prefix`): a change of shape is a new Job
    (and a
    new key), while re-applying an unchanged deployment is a no-op. At most 40 + 17
    characters, within the 63 that the Job controller's ``job-name`` pod label allows.
    """
    return f"{spec.name}-compile-{artifact_key_digest(spec)}"


def artifact_key_digest(spec: ModelDeploymentSpec) -> str:
    """Eight hex digits of the hash of ``spec``'s artifact key: names that change with it."""
    return hashlib.sha256(artifacts.artifact_prefix(spec).encode()).hexdigest()[:8]


def completion_marker_path(spec: ModelDeploymentSpec) -> str:
    """Where the completion marker of ``spec``'s artifacts appears inside a serving pod.

    The artifacts volume mounts the artifact key at :data:`ARTIFACTS_MOUNT_PATH`, so the
    marker key (:func:`eks_inference.specification.artifacts.completion_marker_key`) is this file.
    """
    return f"{compiled_artifacts_path(spec)}/{artifacts.COMPLETION_MARKER_NAME}"


def artifacts_gate_command(spec: ModelDeploymentSpec, *, bucket_name: str) -> list[str]:
    """Command of the init container that holds a Neuron server until its artifacts are whole.

    It succeeds only when the completion marker exists under the mounted artifacts; otherwise
    it fails naming the artifact key, the marker and the compile job to run. The kubelet
    retries a failed init container with back-off, and the artifacts volume's one-minute
    metadata TTL lets it see a marker written after the pod started, so a server applied
    before its compile finished starts on its own once the compile job succeeds.
    """
    marker = completion_marker_path(spec)
    marker_uri = f"s3://{bucket_name}/{artifacts.completion_marker_key(spec)}"
    message = (
        f"compiled Neuron artifacts s3://{bucket_name}/{artifacts.artifact_prefix(spec)} are "
        f"not complete: no completion marker {marker_uri} (looked for {marker}). Run the "
        f"compile job {compile_job_name(spec)} (k8s_manifests/{spec.name}/*-{COMPILE_JOB_ROLE}"
        ".yaml, or neuron.run_compile_job: true) and wait for it to succeed; this check is "
        "retried until then."
    )
    script = (
        f"if [ -f {shlex.quote(marker)} ]; then\n"
        f"  echo {shlex.quote(f'compiled artifacts complete: {marker}')}\n"
        "  exit 0\n"
        "fi\n"
        f"echo {shlex.quote(message)} >&2\n"
        "exit 1\n"
    )
    return ["sh", "-c", script]


def memory_share_mib(memory_mib: int, fraction: float, cap_mib: int) -> int:
    """A share of a pod's memory in whole 256 MiB, at most ``cap_mib``."""
    return min(int(memory_mib * fraction) // 256 * 256, cap_mib)


# libyaml's emitter when PyYAML was built with it (its wheels are): the same text, byte for
# byte, as the pure-Python emitter's, in a seventh of the time.
if TYPE_CHECKING:
    _SafeDumper = yaml.SafeDumper
else:
    _SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_STR_TAG = "tag:yaml.org,2002:str"


class _ReadableDumper(_SafeDumper):
    """YAML for reviewers: block style, multi-line strings as literal blocks, no anchors or
    aliases.

    Dicts, lists and strings (nearly every node of a Kubernetes object) become the very nodes
    the generic representer would build with :func:`dump_yaml`'s settings (keys in the order
    given, block style), without its dispatch; scalar tags are resolved once per text. Every
    other value goes through the generic representer.
    """

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def represent_data(self, data: Any) -> yaml.Node:
        kind = type(data)
        if kind is dict:
            pairs = [(self.represent_data(k), self.represent_data(v)) for k, v in data.items()]
            return yaml.MappingNode(_MAP_TAG, pairs, flow_style=False)
        if kind is list:
            items = [self.represent_data(item) for item in data]
            return yaml.SequenceNode(_SEQ_TAG, items, flow_style=False)
        if kind is str:
            return yaml.ScalarNode(_STR_TAG, data, style="|" if "\n" in data else None)
        node: yaml.Node = super().represent_data(data)
        return node

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: Any) -> str:
        if kind is yaml.ScalarNode:
            return scalar_tag(value, implicit)
        tag: str = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag


def dump_yaml(documents: list[Any]) -> str:
    """Documents as one YAML stream, keys in the order given, deterministic for equal input.

    The text is :func:`libyaml_yaml`'s, byte for byte: written straight from the data by
    :func:`~eks_inference.output.yaml_text.block_yaml` where it can, by libyaml otherwise.
    """
    text = block_yaml(documents)
    return libyaml_yaml(documents) if text is None else text


def libyaml_yaml(documents: list[Any]) -> str:
    """Documents as one YAML stream written by libyaml's emitter with :class:`_ReadableDumper`
    (block style, width 100): the reference the fast writer's text is held to."""
    return yaml.dump_all(
        documents, Dumper=_ReadableDumper, sort_keys=False, default_flow_style=False, width=WIDTH
    )
