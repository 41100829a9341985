"""The artifacts gate: a Neuron server waits for a complete set of compiled artifacts.

A Neuron deployment with a compiled-artifacts prefix that may not compile at start-up only ever
loads, so its serving pods start behind an init container that looks for the completion marker
the compile job writes last. This module decides which pods are gated, where the marker appears
inside them, and names the compile job (its Job and its chart's role) the gate's message points
to; :func:`eks_inference.charts.pod.artifacts_gate` builds the container.
"""

from __future__ import annotations

import hashlib
import shlex

from eks_inference.charts.model_server import compiled_artifacts_path
from eks_inference.specification import artifacts
from eks_inference.specification.deployment import ModelDeploymentSpec

# Role of the chart holding a deployment's Neuron compile job.
COMPILE_JOB_ROLE = "compile-job"

# The init container that keeps a Neuron model server from starting on an incomplete artifact
# set. It only tests for one file, so it gets a fixed sliver of CPU and memory (requests equal
# limits, keeping the pod's Guaranteed QoS); it runs the server's own image, which the node
# pulls anyway, so the check costs no extra image.
ARTIFACTS_GATE_CONTAINER = "check-compiled-artifacts"
ARTIFACTS_GATE_CPU_MILLIS = 100
ARTIFACTS_GATE_MEMORY_MIB = 64


def gates_on_compiled_artifacts(spec: ModelDeploymentSpec) -> bool:
    """True when ``spec``'s serving pods must wait for a complete compiled artifact set.

    That is every Neuron deployment with a compiled-artifacts prefix that may not compile at
    start-up: its pods only ever load, so an incomplete set must keep them from starting.
    """
    return spec.has_compiled_artifacts and not spec.neuron_options.allow_compile_at_startup


def compile_job_name(spec: ModelDeploymentSpec) -> str:
    """Name of the Job compiling ``spec``'s artifacts: ``<deployment>-compile-<key hash>``.

    Jobs are immutable, so the name carries a short hash of the artifact key
    (:func:`eks_inference.specification.artifacts.artifact_prefix`): a change of shape is a new
    Job (and a new key), while re-applying an unchanged deployment is a no-op. At most 40 + 17
    characters, within the 63 that the Job controller's ``job-name`` pod label allows.
    """
    return f"{spec.name}-compile-{artifact_key_digest(spec)}"


def artifact_key_digest(spec: ModelDeploymentSpec) -> str:
    """Eight hex digits of the hash of ``spec``'s artifact key: names that change with it."""
    return hashlib.sha256(artifacts.artifact_prefix(spec).encode()).hexdigest()[:8]


def completion_marker_path(spec: ModelDeploymentSpec) -> str:
    """Where the completion marker of ``spec``'s artifacts appears inside a serving pod.

    The artifacts volume mounts the artifact key at
    :data:`~eks_inference.charts.model_server.ARTIFACTS_MOUNT_PATH`, so the marker key
    (:func:`eks_inference.specification.artifacts.completion_marker_key`) is this file.
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
