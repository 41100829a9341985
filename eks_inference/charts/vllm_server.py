"""The vLLM OpenAI server as every engine and job that runs it is told to: flags, environment,
writable directories, and the metrics it exports.

Standalone vLLM (:mod:`eks_inference.engines.vllm.engine`) serves with these, the Neuron
compile job (:mod:`eks_inference.charts.compile_job`) compiles with the very same, and Ray
Serve's engine arguments (:mod:`eks_inference.engines.rayservice.serve_config`) follow them.
Pure functions, no cdk8s, so that what a model server is told can be read and tested on its
own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from eks_inference import metrics, names
from eks_inference.charts import adapters, kv_offload, pod
from eks_inference.charts.context import RenderContext
from eks_inference.charts.model_server import OPENAI_PORT, compiled_artifacts_path
from eks_inference.charts.weights_loaders import loader_of
from eks_inference.metrics import Metric
from eks_inference.observability.observed import EngineMetrics
from eks_inference.specification.artifacts import override_neuron_config
from eks_inference.specification.deployment import ModelDeploymentSpec

# The OpenAI server's supported entry point (0.16 on Neuron, 0.34 on GPUs); the model is its
# positional argument, since `--model` is deprecated there.
VLLM_SERVE_COMMAND = ("vllm", "serve")
# Flags vLLM removed; rendering them would stop the server at argument parsing. vLLM 0.34
# accepts --disable-log-requests again, as the negation of --enable-log-requests (its
# default), but the Neuron server's 0.16 refuses it, so it stays unrendered everywhere.
REMOVED_VLLM_FLAGS = frozenset({"--device", "--disable-log-requests"})
# Writable directories on a read-only root filesystem: HOME (and with it every cache vLLM,
# Hugging Face, Triton, FlashInfer and torch keep under ~/.cache) and /tmp (torch inductor,
# Neuron compiler work directories). Bounded so that a runaway cache is evicted rather than
# filling the node's disk, which three pods of an inf2.48xlarge share.
HOME_PATH = "/home/vllm"
TMP_PATH = "/tmp"
SHM_PATH = "/dev/shm"
HOME_MIB = 16 * 1024
TMP_MIB = 16 * 1024
# /dev/shm: a quarter of the pod's memory, at most 16 GiB. vLLM's engine processes exchange
# inputs through shared memory and NCCL uses it between tensor-parallel ranks; the container
# runtime's default of 64 MiB makes both fail.
_SHM_FRACTION = 0.25
_SHM_CAP_MIB = 16 * 1024


def _compact_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def neuron_additional_config(spec: ModelDeploymentSpec) -> dict[str, Any]:
    """The ``--additional-config`` payload of the Neuron plugin: ``override_neuron_config``."""
    return {"override_neuron_config": override_neuron_config(spec)}


def vllm_server_args(spec: ModelDeploymentSpec, *, bucket_name: str) -> list[str]:
    """Arguments of ``vllm serve`` (:data:`VLLM_SERVE_COMMAND`) for ``spec``.

    The first, positional, is the model as the weights loader gives it
    (:func:`~eks_inference.charts.weights_loaders.loader_of`): read from ``s3://<bucket>/<prefix>``
    by
    the Run:ai streamer, or from the Mountpoint volume at ``/mnt/model``; clients name it by
    its Hugging Face id. The loader's own flags follow the engine's, then the LoRA adapters'
    with ``adapters`` (:mod:`eks_inference.charts.adapters`), then LMCache's with
    ``kv_cache`` (:mod:`eks_inference.charts.kv_offload`).

    On Neuron the compiled graph fixes the batch (``max_num_seqs``) and the plugin forces the
    KV block size to ``max_model_len`` when prefix caching is off, so prefix caching is
    disabled explicitly, ``--block-size`` is left to the plugin (vLLM's parser accepts only
    1-256), ``--num-gpu-blocks-override`` equals ``max_num_seqs`` (one block per sequence),
    and buckets and overrides go in ``--additional-config``. There is no
    ``--gpu-memory-utilization`` (the plugin sizes HBM itself) and never ``--quantization``.
    """
    limits = spec.limits
    loader = loader_of(spec)
    args = [
        loader.model(spec, bucket_name=bucket_name),
        "--served-model-name",
        spec.model.id,
        "--tensor-parallel-size",
        str(spec.tensor_parallel_size),
        "--max-model-len",
        str(limits.max_model_len),
        "--max-num-seqs",
        str(limits.max_num_seqs),
        "--dtype",
        spec.model.architecture.dtype,
    ]
    if spec.on_neuron:
        args += [
            "--no-enable-prefix-caching",
            "--num-gpu-blocks-override",
            str(limits.max_num_seqs),
            "--additional-config",
            _compact_json(neuron_additional_config(spec)),
        ]
    else:
        args += [
            "--block-size",
            str(limits.block_size),
            "--gpu-memory-utilization",
            str(limits.gpu_memory_utilization),
        ]
    return [
        *args,
        *group_args(spec, node_rank="0"),
        *loader.server_args(spec),
        *adapters.server_args(spec),
        *kv_offload.server_args(spec),
        "--host",
        "0.0.0.0",
        "--port",
        str(OPENAI_PORT),
    ]


# The port the group's leader (node rank 0) listens on for the other ranks' torch.distributed
# rendezvous: vLLM's default (ParallelConfig.master_port), written out so the policy and the
# docs can name it.
GROUP_MASTER_PORT = 29501


def group_args(spec: ModelDeploymentSpec, *, node_rank: str) -> list[str]:
    """The flags that make ``spec``'s server one rank of a multi-node group (none on one node).

    vLLM's own multi-node mode (the multiprocessing backend across nodes, vLLM 0.34): tensor
    parallel inside the node, one pipeline stage per node, every rank joining the leader's
    rendezvous at ``$(LWS_LEADER_ADDRESS)``, which Kubernetes expands from the variable the
    LeaderWorkerSet controller gives each container. ``node_rank`` is ``0`` on the leader and
    the pod's worker index on the others.
    """
    if spec.multi_node is None:
        return []
    nodes = str(spec.nodes_per_replica)
    return [
        "--pipeline-parallel-size",
        nodes,
        "--distributed-executor-backend",
        "mp",
        "--nnodes",
        nodes,
        "--node-rank",
        node_rank,
        "--master-addr",
        f"$({names.LWS_LEADER_ADDRESS_ENV})",
        "--master-port",
        str(GROUP_MASTER_PORT),
    ]


# Flags of `vllm serve` that belong to its HTTP server, not to the engine.
_SERVER_FLAGS = frozenset({"--host", "--port", "--middleware"})


def vllm_engine_args(spec: ModelDeploymentSpec, *, bucket_name: str) -> dict[str, Any]:
    """The engine arguments of :func:`vllm_server_args` as vLLM's ``EngineArgs`` names them.

    For servers that build the engine themselves from a mapping (Triton's vLLM backend reads
    ``model.json`` into ``AsyncEngineArgs``): the positional model becomes ``model``, each
    ``--flag value`` the field ``flag`` with the value as JSON reads it (numbers, objects) or
    else the string, ``--no-flag`` the field ``flag`` set to false, and the HTTP server's own
    flags are left out. The same arguments, so a deployment is served alike by every engine.
    """
    args = vllm_server_args(spec, bucket_name=bucket_name)
    engine: dict[str, Any] = {"model": args[0]}
    i = 1
    while i < len(args):
        flag = args[i]
        value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        i += 1 if value is None else 2
        if flag in _SERVER_FLAGS:
            continue
        name = flag.removeprefix("--").replace("-", "_")
        if value is None:
            negated = name.startswith("no_")
            engine[name.removeprefix("no_") if negated else name] = not negated
            continue
        try:
            engine[name] = json.loads(value)
        except json.JSONDecodeError:
            engine[name] = value
    return engine


def shared_memory_mib(memory_mib: int) -> int:
    """Size of the memory-backed ``/dev/shm`` of a vLLM container with ``memory_mib``."""
    return pod.memory_share_mib(memory_mib, _SHM_FRACTION, _SHM_CAP_MIB)


def scratch_volumes(memory_mib: int) -> tuple[list[pod.Json], list[pod.Json]]:
    """The writable directories of a vLLM server container with ``memory_mib``: the
    volumes and their mounts, HOME, /tmp and the memory-backed /dev/shm."""
    volumes = [
        pod.empty_dir("home", f"{HOME_MIB}Mi"),
        pod.empty_dir("tmp", f"{TMP_MIB}Mi"),
        pod.empty_dir("shm", f"{shared_memory_mib(memory_mib)}Mi", in_memory=True),
    ]
    mounts = [pod.mount("home", HOME_PATH), pod.mount("tmp", TMP_PATH), pod.mount("shm", SHM_PATH)]
    return volumes, mounts


def vllm_metrics(
    *,
    exported: Callable[[Metric], Metric] = lambda metric: metric,
    also_waiting: tuple[Metric, ...] = (),
) -> EngineMetrics:
    """vLLM's metrics as a deployment is read through them.

    ``exported`` names each metric as it reaches Prometheus when something other than vLLM's
    own ``/metrics`` exports it (Ray's exporter, :func:`eks_inference.metrics.ray_exported`);
    ``also_waiting`` are the queues requests wait in before they reach vLLM (a router's, an
    activator's), counted with vLLM's own.
    """
    return EngineMetrics(
        running=exported(metrics.VLLM_REQUESTS_RUNNING),
        waiting=(exported(metrics.VLLM_REQUESTS_WAITING), *also_waiting),
        kv_cache=exported(metrics.VLLM_KV_CACHE_USAGE),
        ttft=exported(metrics.VLLM_TIME_TO_FIRST_TOKEN),
        itl=exported(metrics.VLLM_INTER_TOKEN_LATENCY),
        e2e=exported(metrics.VLLM_E2E_LATENCY),
        prompt_tokens=exported(metrics.VLLM_PROMPT_TOKENS),
        generation_tokens=exported(metrics.VLLM_GENERATION_TOKENS),
    )


def server_environment(spec: ModelDeploymentSpec, context: RenderContext) -> dict[str, str]:
    """Environment of a vLLM OpenAI server container of ``spec``.

    Caches go under the writable HOME; the Hugging Face Hub is never contacted (weights come
    from the model bucket only); the weights loader adds what it needs (the Run:ai streamer's
    S3 client gets the region explicitly), and LMCache its tiers with ``kv_cache``. On Neuron
    the runtime gets TP cores, the plugin the compiled-artifacts path and the compiler a cache
    on the writable HOME (its default, /var/tmp, is on the read-only root). The Neuron compile
    job runs the same server with this environment, pointing only ``NEURON_COMPILED_ARTIFACTS``
    elsewhere.
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
    env.update(loader_of(spec).environment(spec, region=context.region))
    env.update(kv_offload.environment(spec))
    env.update(adapters.environment(spec))
    if spec.on_neuron:
        env["NEURON_RT_NUM_CORES"] = str(spec.tensor_parallel_size)
        env["NEURON_COMPILED_ARTIFACTS"] = compiled_artifacts_path(spec)
        env["NEURON_COMPILE_CACHE_URL"] = f"{HOME_PATH}/.cache/neuron-compile-cache"
    return env
