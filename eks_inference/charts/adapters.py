"""LoRA adapters on a vLLM server: the volume of the adapters prefix, the flags, the
environment, and the paths the load balancer must never forward.

Every engine that runs vLLM's own OpenAI server with ``adapters``
(:class:`~eks_inference.specification.adapters.Adapters`) reads them as this module says:

- **Volume.** The adapters prefix is mounted read-only by Mountpoint at
  :data:`ADAPTERS_MOUNT_PATH`, one folder per adapter, through a PersistentVolume of its own
  (``<deployment>-adapters``): the Mountpoint driver is granted that prefix, and nothing
  beside the weights. Its metadata is cached for :data:`ADAPTERS_METADATA_TTL` seconds
  rather than indefinitely, so a folder uploaded after the servers started is seen on its
  first request instead of being remembered as missing.
- **Flags** (vLLM 0.34.0): ``--enable-lora`` with ``--max-loras``, ``--max-lora-rank`` and
  ``--max-cpu-loras``; ``preload`` adapters are ``--lora-modules <name>=<folder>``, which
  the server registers at start-up.
- **On demand.** vLLM finds an adapter it was not started with through its LoRA resolver
  plugins, and only when ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` is set
  (``vllm/entrypoints/serve/engine/serving.py``, ``_check_model``); the filesystem resolver
  (entry point ``lora_filesystem_resolver``) looks for ``<name>/adapter_config.json`` under
  ``VLLM_LORA_RESOLVER_CACHE_DIR``, here the mounted prefix, and loads it only when its
  ``base_model_name_or_path`` equals the server's model as vLLM holds it
  (``model_config.model`` in ``resolve_lora`` of ``vllm/entrypoints/openai/models/serving.py``):
  the model argument when it is a path in the pod (:func:`on_demand_base_model`,
  ``/mnt/model``), not the served name clients send. With the Run:ai streamer that argument
  is an S3 URI vLLM replaces with a download directory of its own naming, so adapters are
  not found on demand there. The Hugging Face resolver stays inert: it registers only with
  ``VLLM_LORA_RESOLVER_HF_REPO_LIST``, never set.
- **Runtime endpoints.** The same variable registers ``POST /v1/load_lora_adapter`` and
  ``POST /v1/unload_lora_adapter`` (``vllm/entrypoints/serve/lora/api_router.py``), which
  load any path of the pod's filesystem. They sit under ``/v1``, which the load balancer
  forwards, so the deployment's Ingress answers them with a fixed 404 itself
  (:func:`runtime_paths`, the route's ``blocked_paths`` that
  :mod:`eks_inference.charts.ingress` renders); inside the
  cluster they need the API key like every other path (the shipped middleware).
"""

from __future__ import annotations

from eks_inference.catalog import sizing
from eks_inference.charts.context import RenderContext
from eks_inference.charts.mountpoint import MountpointVolume, cache_size_gib, deployment_volume
from eks_inference.charts.pod import Json, claim_volume, mount
from eks_inference.charts.weights_loaders import loader_of
from eks_inference.specification.adapters_rules import whole_adapter_bytes
from eks_inference.specification.deployment import ModelDeploymentSpec

ADAPTERS_ROLE = "adapters"
ADAPTERS_MOUNT_PATH = "/mnt/adapters"
# Seconds Mountpoint trusts a listing of the adapters prefix: new folders appear within this.
ADAPTERS_METADATA_TTL = "60"
#: vLLM's runtime adapter endpoints, registered with VLLM_ALLOW_RUNTIME_LORA_UPDATING.
RUNTIME_ADAPTER_PATHS = ("/v1/load_lora_adapter", "/v1/unload_lora_adapter")
RUNTIME_UPDATING_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
RESOLVER_DIRECTORY_ENV = "VLLM_LORA_RESOLVER_CACHE_DIR"


def adapters_volume(spec: ModelDeploymentSpec, context: RenderContext) -> MountpointVolume | None:
    """The Mountpoint volume of ``spec``'s adapters prefix (``None`` without adapters). Its
    local cache holds every adapter served, at most ``max_lora_rank`` each."""
    adapters = spec.adapters
    if adapters is None:
        return None
    whole = whole_adapter_bytes(spec)
    return deployment_volume(
        spec,
        ADAPTERS_ROLE,
        bucket_name=context.bucket_name,
        region=context.region,
        prefix=adapters.prefix,
        cache_size_gib=cache_size_gib(sizing.gib(whole * len(adapters.names))),
        metadata_ttl=ADAPTERS_METADATA_TTL,
    )


def pod_volume(volume: MountpointVolume) -> tuple[Json, Json]:
    """The pod's volume of the adapters claim and the server container's read-only mount."""
    return (
        claim_volume(ADAPTERS_ROLE, volume.claim_name),
        mount(ADAPTERS_ROLE, ADAPTERS_MOUNT_PATH, read_only=True),
    )


def server_args(spec: ModelDeploymentSpec) -> list[str]:
    """The ``vllm serve`` flags of ``spec``'s adapters (none without adapters)."""
    adapters = spec.adapters
    if adapters is None:
        return []
    args = [
        "--enable-lora",
        "--max-loras",
        str(adapters.max_loras),
        "--max-lora-rank",
        str(adapters.max_lora_rank),
        "--max-cpu-loras",
        str(adapters.cpu_loras),
    ]
    if adapters.preload:
        args += [
            "--lora-modules",
            *(f"{name}={ADAPTERS_MOUNT_PATH}/{name}" for name in adapters.preload),
        ]
    return args


def environment(spec: ModelDeploymentSpec) -> dict[str, str]:
    """With ``on_demand`` adapters, what turns vLLM's filesystem resolver on over the mount."""
    adapters = spec.adapters
    if adapters is None or not adapters.on_demand:
        return {}
    return {RUNTIME_UPDATING_ENV: "1", RESOLVER_DIRECTORY_ENV: ADAPTERS_MOUNT_PATH}


def on_demand_base_model(spec: ModelDeploymentSpec) -> str | None:
    """What vLLM's filesystem resolver compares an on-demand adapter's
    ``base_model_name_or_path`` with: the server's model argument when it is a path in the
    pod; ``None`` when it is an object-store URI, which vLLM replaces with a directory of its
    own."""
    model = loader_of(spec).model(spec, bucket_name="")
    return model if model.startswith("/") else None


def runtime_paths(spec: ModelDeploymentSpec) -> tuple[str, ...]:
    """The runtime adapter endpoints ``spec``'s servers register (with ``on_demand``
    adapters), which its Ingress answers with a 404 itself."""
    return RUNTIME_ADAPTER_PATHS if environment(spec) else ()
