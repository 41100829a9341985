"""LMCache in a vLLM server (``kv_cache``): its flags, environment, disk-tier volume and image.

Every engine that serves vLLM on GPUs with ``kv_cache`` asks this module, so the connector, the
tiers and their sizes are written once. Read at the pinned releases (vLLM 0.29.0 and LMCache
0.5.6, :mod:`eks_inference.versions`):

- ``--kv-transfer-config {"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}``: vLLM's
  connector factory (``vllm/distributed/kv_transfer/kv_connector/factory.py``) registers
  ``LMCacheConnectorV1``, which loads LMCache's ``vllm_v1_adapter``; ``kv_both`` stores and
  retrieves.
- The attention backend is FlashInfer, as the serving guides configure LMCache. vLLM 0.29.0
  (and 0.34.0) has no ``VLLM_ATTENTION_BACKEND`` variable any more (``vllm/envs.py``); its
  setting is the flag ``--attention-backend FLASHINFER`` (``AttentionBackendEnum``).
- No ``--enforce-eager``: neither LMCache 0.5.6's vLLM integration nor vLLM 0.29.0's connector
  refuses CUDA graphs, so the server keeps them (and their decode speed).
- ``PYTHONHASHSEED=0``: LMCache's token hasher keys chunks with Python's ``hash`` and warns
  when the seed is unset (``lmcache/v1/multiprocess/token_hasher.py``); a fixed seed gives
  every process and pod the same keys.
- ``PROMETHEUS_MULTIPROC_DIR``: LMCache records its metrics in vLLM's engine process, apart
  from the API server that serves ``/metrics``; it writes them as ``prometheus_client``
  multiprocess files (into this directory, or into one of its own that the API server never
  reads when it is unset: ``PrometheusLogger._ensure_multiprocess_dir`` in
  ``lmcache/observability.py``), and vLLM's ``/metrics`` collects every process's files when
  the variable is set at its start (``get_prometheus_registry`` in
  ``vllm/v1/metrics/prometheus.py``, read at a stored commit of vllm-project/vllm, not at the
  image's release: unverified for the image). So both get one directory, an emptyDir that
  exists before either starts, and LMCache's metrics reach the server's own ``/metrics``.
- Tiers by environment (``LMCACHE_`` + the key of ``lmcache/v1/config.py``): ``LOCAL_CPU`` and
  ``MAX_LOCAL_CPU_SIZE`` (GiB, ``size * 1024**3``), ``LOCAL_DISK`` (a ``file://`` directory)
  and ``MAX_LOCAL_DISK_SIZE`` (GiB).
"""

from __future__ import annotations

import json

from eks_inference.charts import pod
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.versions import LMCACHE_VLLM_IMAGE, VLLM_GPU_IMAGE

LMCACHE_CONNECTOR = "LMCacheConnectorV1"
ATTENTION_BACKEND = "FLASHINFER"
# The disk tier's directory: an emptyDir, so on the node's striped instance store, where
# every pool of an instance type with one keeps the kubelet's directory (node_bootstrap); a
# disk tier is refused on an instance type without (kv_serving_rules).
DISK_TIER_VOLUME = "kv-cache-disk"
DISK_TIER_PATH = "/mnt/kv-cache"
# The multiprocess metric files of the server's processes (see the module): a few files per
# process and metric.
METRICS_VOLUME = "metrics-multiproc"
METRICS_PATH = "/var/run/prometheus-multiproc"
METRICS_MIB = 64


def transfer_config() -> str:
    """The ``--kv-transfer-config`` value: LMCache, storing and retrieving."""
    config = {"kv_connector": LMCACHE_CONNECTOR, "kv_role": "kv_both"}
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def server_args(spec: ModelDeploymentSpec) -> list[str]:
    """Flags of ``vllm serve`` that wire LMCache in (none without ``kv_cache``)."""
    if spec.kv_cache is None:
        return []
    return [
        "--kv-transfer-config",
        transfer_config(),
        "--attention-backend",
        ATTENTION_BACKEND,
    ]


def environment(spec: ModelDeploymentSpec) -> dict[str, str]:
    """LMCache's tiers and the hash seed (none without ``kv_cache``)."""
    offload = spec.kv_cache
    if offload is None:
        return {}
    env = {
        "PROMETHEUS_MULTIPROC_DIR": METRICS_PATH,
        "PYTHONHASHSEED": "0",
        "LMCACHE_LOCAL_CPU": "True",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": str(offload.cpu_gib),
    }
    if offload.disk_gib is not None:
        env["LMCACHE_LOCAL_DISK"] = f"file://{DISK_TIER_PATH}/"
        env["LMCACHE_MAX_LOCAL_DISK_SIZE"] = str(offload.disk_gib)
    return env


def image(spec: ModelDeploymentSpec) -> str:
    """The GPU vLLM image: LMCache's build of vLLM's server with ``kv_cache``."""
    return LMCACHE_VLLM_IMAGE if spec.kv_cache is not None else VLLM_GPU_IMAGE


def metrics_volume(spec: ModelDeploymentSpec) -> tuple[pod.Json, pod.Json] | None:
    """The emptyDir of the processes' metric files and its mount, or None without
    ``kv_cache``."""
    if spec.kv_cache is None:
        return None
    return (
        pod.empty_dir(METRICS_VOLUME, f"{METRICS_MIB}Mi"),
        pod.mount(METRICS_VOLUME, METRICS_PATH),
    )


def disk_volume(spec: ModelDeploymentSpec) -> tuple[pod.Json, pod.Json] | None:
    """The disk tier's emptyDir and its mount, or None without a disk tier.

    Bounded to the tier and a tenth more (LMCache's own files beside the chunks), so a runaway
    tier is evicted rather than filling the node's disk.
    """
    offload = spec.kv_cache
    if offload is None or offload.disk_gib is None:
        return None
    return (
        pod.empty_dir(DISK_TIER_VOLUME, f"{disk_request_gib(spec)}Gi"),
        pod.mount(DISK_TIER_VOLUME, DISK_TIER_PATH),
    )


def disk_request_gib(spec: ModelDeploymentSpec) -> int:
    """Ephemeral storage the disk tier reserves on the node (0 without one)."""
    offload = spec.kv_cache
    if offload is None or offload.disk_gib is None:
        return 0
    return offload.disk_gib + -(-offload.disk_gib // 10)


def disk_request(spec: ModelDeploymentSpec) -> dict[str, str]:
    """The ``ephemeral-storage`` request of the disk tier, so the scheduler reserves it."""
    gib = disk_request_gib(spec)
    return {"ephemeral-storage": f"{gib}Gi"} if gib else {}
