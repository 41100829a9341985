"""The Neuron compile job: compile a model once, publish exactly what serving loads.

The Neuron plugin for vLLM loads a precompiled model from ``NEURON_COMPILED_ARTIFACTS`` and,
when it finds none it can load, compiles one (about 15 minutes for an 8B model) and saves it
there. This Job makes that compile a separate, reviewed step: it runs the very vLLM server a
serving pod runs (same image, same flags from
:func:`~eks_inference.charts.vllm_server.vllm_server_args`, same environment from
:func:`~eks_inference.charts.vllm_server.server_environment`, same read-only weights volume)
with ``NEURON_COMPILED_ARTIFACTS`` pointed at an empty local directory, so the artifacts it
produces are the ones a server of the same spec would have compiled, and uploads them to the
artifact key (:func:`~eks_inference.specification.artifacts.artifact_prefix`) serving reads.

Why the compile goes to local disk first: Mountpoint for S3 supports neither renames nor random
writes, both of which the compiler and ``torch.save`` rely on, and a compile that wrote
straight into the bucket would expose a half-written set to every server mounting it. The
upload is a separate step and the completion marker
(:func:`~eks_inference.specification.artifacts.completion_marker_key`) is written last, only after
every
artifact is in the bucket: serving pods (their init container) and ``eks-inference preflight``
treat the marker as "the set is complete", so a failed or partial compile is never loaded.
"""

from __future__ import annotations

import math

from eks_inference import names
from eks_inference.catalog import sizing
from eks_inference.catalog.sizing import pod_resources
from eks_inference.charts import pod, vllm_server
from eks_inference.charts.artifacts_gate import (
    COMPILE_JOB_ROLE,
    compile_job_name,
    completion_marker_path,
)
from eks_inference.charts.context import RenderContext
from eks_inference.charts.contract import PlatformNeeds, ServiceAccountNeed
from eks_inference.charts.metadata import api_object, metadata, object_labels, service_account
from eks_inference.charts.model_server import (
    ARTIFACTS_MOUNT_PATH,
    ARTIFACTS_ROLE,
    MODEL_MOUNT_PATH,
    OPENAI_PORT,
    WEIGHTS_ROLE,
)
from eks_inference.charts.mountpoint import MountpointVolume
from eks_inference.charts.record import ChartRecord, deployment_chart
from eks_inference.charts.vllm_server import (
    HOME_PATH,
    SHM_PATH,
    TMP_PATH,
    server_environment,
    shared_memory_mib,
)
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.serve.api_key_auth import HEALTH_PATH
from eks_inference.specification.artifacts import artifact_prefix, completion_marker_key
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import Placement
from eks_inference.specification.startup_budget import (
    NODE_AND_IMAGE_SECONDS,
    compile_seconds,
    model_load_seconds,
    weights_gib,
)
from eks_inference.versions import AWS_CLI_IMAGE, NEURON_VLLM_IMAGE

COMPILE_CONTAINER = "compile"
UPLOAD_CONTAINER = "upload"
# The pod-local directory the compile writes to and the upload reads from: an emptyDir on the
# node's disk. The "already complete" flag lets the compile tell the upload that there is
# nothing to do.
OUTPUT_PATH = "/compile"
LOCAL_ARTIFACTS_PATH = f"{OUTPUT_PATH}/artifacts"
ALREADY_COMPLETE_FLAG = f"{OUTPUT_PATH}/already-complete"
ARTIFACT_KEY_ANNOTATION = "eks-inference.io/artifact-key"
# The Cluster Autoscaler removes under-used nodes by evicting their pods; a compile pod holds
# a third of an inf2.48xlarge, which looks under-used, and would lose hours of work. Karpenter's
# karpenter.sh/do-not-disrupt (pod.do_not_disrupt) says the same to Karpenter.
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"

# Two retries: a compile fails for reasons worth retrying (a node reclaimed, an S3 error
# during the upload), and a third failure is a real problem to look at, not to repeat.
BACKOFF_LIMIT = 2
# Finished Jobs (and their pods' logs) stay a day, long enough to read why a compile failed,
# then go: a Job is immutable, and a changed template under the same name can only be
# applied once the finished one is gone.
TTL_SECONDS_AFTER_FINISHED = 24 * 3600
# How often the compile step asks the local vLLM server whether it is up, and how long it
# lets the server shut down once it is: the artifacts are on disk by then, so a server that
# hangs in shutdown is killed rather than left to hold the Job until its deadline.
HEALTH_POLL_SECONDS = 15
STOP_GRACE_SECONDS = 60

# Uploading reads the local disk and writes to S3 with the AWS CLI's ten concurrent requests:
# one CPU and 1 GiB keep up with it. The upload is budgeted at the same pessimistic 170 MiB/s
# (6 s per GiB) as reading the weights.
_UPLOAD_CPU_MILLIS = 1000
_UPLOAD_MEMORY_MIB = 1024
_UPLOAD_SECONDS_PER_GIB = 6

# The compile step. Arguments ("$@") are the vLLM server's, exactly as serving passes them.
# The server compiles (nothing loadable is in the empty output directory), saves the
# artifacts there and loads them; only then does its /health answer 200, so a 200 means the
# artifacts are complete on local disk. If the server exits first, the compile failed.
# Artifacts already complete in the bucket (the marker is visible through the read-only
# artifacts volume) are not compiled again: re-applying the Job, e.g. with
# `kubectl apply -f k8s_manifests/<deployment>/`, is cheap and safe.
COMPILE_SCRIPT = r"""set -euo pipefail
if [ -f "$COMPLETION_MARKER" ]; then
  echo "compiled artifacts $ARTIFACT_URI are already complete ($COMPLETION_MARKER exists);" \
    "nothing to compile. Delete that marker object to compile them again."
  touch "$ALREADY_COMPLETE_FLAG"
  exit 0
fi
mkdir -p "$NEURON_COMPILED_ARTIFACTS"
echo "compiling for $ARTIFACT_URI into $NEURON_COMPILED_ARTIFACTS"
vllm serve "$@" &
server=$!
until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
    "$HEALTH_URL" 2>/dev/null; do
  if ! kill -0 "$server" 2>/dev/null; then
    status=0
    wait "$server" || status=$?
    echo "vLLM exited with status $status before the compiled model loaded; no artifacts" \
      "are published" >&2
    exit 1
  fi
  sleep "$HEALTH_POLL_SECONDS"
done
echo "vLLM loaded the compiled model; stopping it"
kill -TERM "$server"
for _ in $(seq "$STOP_GRACE_SECONDS"); do
  kill -0 "$server" 2>/dev/null || break
  sleep 1
done
kill -KILL "$server" 2>/dev/null || true
wait "$server" || true
if [ -z "$(ls -A "$NEURON_COMPILED_ARTIFACTS")" ]; then
  echo "vLLM served but left $NEURON_COMPILED_ARTIFACTS empty; nothing to publish" >&2
  exit 1
fi
du -sh "$NEURON_COMPILED_ARTIFACTS"
"""

# The upload step. `set -euo pipefail` makes any failed command (a failed part of the
# recursive copy included) end the script before the marker is written, so the marker exists
# only for a whole set. `cp` rather than `sync`: it needs only s3:PutObject (multipart uploads
# included) on the key, all the compile role may do there, where `sync` would also list; and
# every file of the set is written again on a retry.
UPLOAD_SCRIPT = r"""set -euo pipefail
if [ -f "$ALREADY_COMPLETE_FLAG" ]; then
  echo "$MARKER_URI exists; nothing to upload"
  exit 0
fi
if [ -z "$(ls -A "$LOCAL_ARTIFACTS")" ]; then
  echo "no compiled artifacts in $LOCAL_ARTIFACTS; not publishing anything" >&2
  exit 1
fi
aws s3 cp --recursive --only-show-errors "$LOCAL_ARTIFACTS/" "$ARTIFACT_URI"
echo "uploaded $LOCAL_ARTIFACTS to $ARTIFACT_URI"
printf '{"artifacts": "%s", "compiler_image": "%s", "completed_at": "%s"}\n' \
  "$ARTIFACT_URI" "$COMPILER_IMAGE" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  | aws s3 cp - "$MARKER_URI"
echo "wrote the completion marker $MARKER_URI"
"""


def active_deadline_seconds(spec: ModelDeploymentSpec) -> int:
    """The whole Job's time limit: one node launch and image pull, then every attempt.

    An attempt loads the weights, compiles (twice the usual time), loads the compiled model
    and uploads the artifacts; there are ``BACKOFF_LIMIT + 1`` attempts. About three hours
    for an 8B model. A compile stuck past this is failed rather than left holding cores.
    """
    upload = math.ceil(weights_gib(spec) * _UPLOAD_SECONDS_PER_GIB)
    attempt = model_load_seconds(spec) + compile_seconds(spec) + upload
    return NODE_AND_IMAGE_SECONDS + (BACKOFF_LIMIT + 1) * attempt


def compile_job_chart(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    *,
    weights: MountpointVolume,
    artifacts: MountpointVolume,
) -> ChartRecord:
    """A deployment's Neuron compile Job and its ServiceAccount.

    - **ServiceAccount** ``names.compile_service_account_name(spec.name)``: recorded in
      its needs as the one identity that may write this deployment's artifact key (and
      nothing else); serving pods get no write access to the artifacts at all.
    - **Job** :func:`~eks_inference.charts.artifacts_gate.compile_job_name` (the deployment's name
      and a hash of the artifact key, so a new shape is a new Job), annotated with the key.
      One pod on the deployment's worker pool with the pool's node selector and tolerations,
      TP NeuronCores, the Neuron scheduler when it takes part of a node, and the CPU and
      memory of one serving pod, all of it for the compiler (``neuronx-cc`` is CPU and memory
      hungry). ``restartPolicy: Never`` and ``backoffLimit`` 2: a failed attempt is a new
      pod, whose predecessor's logs remain; evictions and node loss do not count as
      failures. ``activeDeadlineSeconds`` from the model's size, ``ttlSecondsAfterFinished``
      a day.

    The pod runs two steps. The init container ``compile`` runs the Neuron vLLM image with
    the serving flags and environment, compiles into a local emptyDir and succeeds only when
    the server loaded what it compiled; the container ``upload`` (the AWS CLI image) copies
    the directory to ``s3://<bucket>/<artifact key>`` and writes the completion marker last.
    When the marker already exists the compile is skipped and nothing is uploaded. No probes:
    the scripts themselves wait for what they need.
    """
    if not spec.has_compiled_artifacts:
        raise ValueError(
            f"deployment {spec.name!r} has no compiled Neuron artifacts to compile: the "
            "compile job exists for Inferentia2 deployments with "
            "neuron.compiled_artifacts_prefix"
        )
    key = artifact_prefix(spec)
    artifact_uri = f"s3://{context.bucket_name}/{key}"
    labels = object_labels(spec, COMPILE_JOB_ROLE)
    account = names.compile_service_account_name(spec.name)
    job_name = compile_job_name(spec)
    pod_spec = _pod(spec, placement, context, account, weights, artifacts)
    account_object = service_account(account, labels)
    job = api_object(
        "batch/v1",
        "Job",
        metadata(job_name, labels, annotations={ARTIFACT_KEY_ANNOTATION: artifact_uri}),
        {
            "spec": {
                "backoffLimit": BACKOFF_LIMIT,
                "activeDeadlineSeconds": active_deadline_seconds(spec),
                "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
                "podFailurePolicy": {
                    "rules": [
                        # A pod evicted, preempted or lost with its node is retried
                        # without using up one of the retries.
                        {
                            "action": "Ignore",
                            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                        }
                    ]
                },
                "template": {
                    "metadata": {
                        "labels": labels,
                        # Neither autoscaler may move a compile: hours of work.
                        "annotations": {
                            SAFE_TO_EVICT_ANNOTATION: "false",
                            **pod.do_not_disrupt(None),
                        },
                    },
                    "spec": pod_spec,
                },
            }
        },
    )
    return deployment_chart(
        spec,
        COMPILE_JOB_ROLE,
        [account_object, job],
        PlatformNeeds(
            namespaces=(INFERENCE_NAMESPACE,),
            service_accounts=(
                ServiceAccountNeed(
                    role=names.COMPILE_IDENTITY,
                    name=account,
                    namespace=INFERENCE_NAMESPACE,
                    pods="Neuron compile job",
                    purpose=f"the only writer of {key}",
                    writes=(key,),
                ),
            ),
            pods=(
                # One serving replica's share of a node: the serving pods' need
                # holds the node's packing.
                pod.scheduling_need(
                    (f"Job/{job_name}", "spec", "template"), placement.workers, pod_spec
                ),
            ),
        ),
    )


def _pod(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    service_account: str,
    weights: MountpointVolume,
    artifacts: MountpointVolume,
) -> pod.Json:
    artifact_uri = f"s3://{context.bucket_name}/{artifact_prefix(spec)}"
    share = pod_resources(spec.instance, spec.replicas_per_node)
    compile_env = {
        **server_environment(spec, context),
        # The one difference from serving: compile into local disk, not the read-only
        # artifacts volume.
        "NEURON_COMPILED_ARTIFACTS": LOCAL_ARTIFACTS_PATH,
        "COMPLETION_MARKER": completion_marker_path(spec),
        "ALREADY_COMPLETE_FLAG": ALREADY_COMPLETE_FLAG,
        "ARTIFACT_URI": artifact_uri,
        "HEALTH_URL": f"http://127.0.0.1:{OPENAI_PORT}{HEALTH_PATH}",
        "HEALTH_POLL_SECONDS": str(HEALTH_POLL_SECONDS),
        "STOP_GRACE_SECONDS": str(STOP_GRACE_SECONDS),
    }
    compile_container = {
        "name": COMPILE_CONTAINER,
        "image": NEURON_VLLM_IMAGE,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        # "compile" is the script's $0; the vLLM arguments follow as "$@".
        "command": ["bash", "-c", COMPILE_SCRIPT, COMPILE_CONTAINER],
        "args": vllm_server.vllm_server_args(spec, bucket_name=context.bucket_name),
        "env": pod.env(compile_env),
        "resources": pod.resources(
            {"cpu": share.cpu, "memory": share.memory, **pod.accelerator_resource(spec)},
            # Disk is a request only: the emptyDirs' size limits bound what each may use.
            requested_only={
                "ephemeral-storage": f"{sizing.compile_disk_gib(spec.model.architecture)}Gi"
            },
        ),
        "securityContext": pod.ROOT_IMAGE_SECURITY,
        "volumeMounts": [
            pod.mount("output", OUTPUT_PATH),
            pod.mount("home", HOME_PATH),
            pod.mount("tmp", TMP_PATH),
            pod.mount("shm", SHM_PATH),
            pod.mount(WEIGHTS_ROLE, MODEL_MOUNT_PATH, read_only=True),
            pod.mount(ARTIFACTS_ROLE, ARTIFACTS_MOUNT_PATH, read_only=True),
        ],
    }
    upload_container = {
        "name": UPLOAD_CONTAINER,
        "image": AWS_CLI_IMAGE,
        "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
        "command": ["bash", "-c", UPLOAD_SCRIPT],
        "env": pod.env(
            {
                # The AWS CLI keeps its caches under HOME; /tmp is the writable emptyDir.
                "HOME": TMP_PATH,
                "AWS_REGION": context.region,
                "AWS_DEFAULT_REGION": context.region,
                "LOCAL_ARTIFACTS": LOCAL_ARTIFACTS_PATH,
                "ALREADY_COMPLETE_FLAG": ALREADY_COMPLETE_FLAG,
                "ARTIFACT_URI": artifact_uri,
                "MARKER_URI": f"s3://{context.bucket_name}/{completion_marker_key(spec)}",
                "COMPILER_IMAGE": NEURON_VLLM_IMAGE,
            }
        ),
        "resources": pod.resources(
            {"cpu": f"{_UPLOAD_CPU_MILLIS}m", "memory": f"{_UPLOAD_MEMORY_MIB}Mi"}
        ),
        "securityContext": pod.ROOT_IMAGE_SECURITY,
        "volumeMounts": [
            pod.mount("output", OUTPUT_PATH, read_only=True),
            pod.mount("tmp", TMP_PATH),
        ],
    }
    return {
        "serviceAccountName": service_account,
        # Pod Identity mounts its own token; the Kubernetes API is never called.
        "automountServiceAccountToken": False,
        "restartPolicy": "Never",
        # Both containers run as the images' root, as the serving pods do; the pod's seccomp
        # profile is the runtime's default.
        "securityContext": pod.ROOT_IMAGE_POD_SECURITY,
        # The same pool, tolerations and (for part of a node) Neuron scheduler as serving.
        **pod.placement(placement.workers, spec),
        "initContainers": [compile_container],
        "containers": [upload_container],
        "volumes": [
            pod.empty_dir("output", f"{sizing.compile_output_gib(spec.model.architecture)}Gi"),
            pod.empty_dir("home", f"{sizing.COMPILE_HOME_GIB}Gi"),
            pod.empty_dir("tmp", f"{sizing.COMPILE_TMP_GIB}Gi"),
            pod.empty_dir("shm", f"{shared_memory_mib(share.memory_mib)}Mi", in_memory=True),
            pod.claim_volume(WEIGHTS_ROLE, weights.claim_name),
            pod.claim_volume(ARTIFACTS_ROLE, artifacts.claim_name),
        ],
    }
