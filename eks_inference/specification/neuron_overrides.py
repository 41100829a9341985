"""The ``override_neuron_config`` entries a deployment may set, as data: keys and value types.

``neuron.overrides`` go verbatim into the Neuron plugin's ``override_neuron_config``, which
vLLM Neuron merges over the NxD Inference ``NeuronConfig`` it derives from vLLM's arguments,
and into the key of the compiled artifacts. NeuronConfig only logs a warning for a key it does
not know (a typo that changes nothing but the artifact key), and a value of the wrong type
fails hours later in the compile job. So only the keys below are accepted, each with its
type.

Source, for the pinned Neuron SDK 2.31 (``versions.NEURON_SDK_VERSION``: NxD Inference 0.10
with vLLM Neuron 0.5): ``NeuronConfig.__init__`` in ``src/neuronx_distributed_inference/
models/config.py`` of aws-neuron/neuronx-distributed-inference, read at commit c63afe0
("Release 2.29", NxDI 0.9, the newest public source; the 2.30 and 2.31 release notes list no
change but the package version), and the NeuronConfig attributes of the NxD Inference API
guide (aws-neuron/aws-neuron-sdk, ``libraries/nxd-inference/api-guides/api-guide.rst``).
What vLLM Neuron sets itself is ``_get_default_neuron_config`` in
``vllm_neuron/worker/neuronx_distributed_model_loader.py`` of vllm-project/vllm-neuron.

Left out on purpose:

- keys the spec owns (:data:`SPEC_OWNED_KEYS`): vLLM Neuron derives them from the flags the
  charts pass, and the artifact key, the sizing and the engine must agree with them;
- NKI kernel switches (``*_kernel_enabled``): NxD Inference 0.9 and later do not run NKI
  kernels on Inf2 (Neuron 2.29 release notes, breaking changes);
- features that need files, models or environment the deployment does not provide:
  quantization (a quantized checkpoint, and ``XLA_HANDLE_SPECIAL_SCALAR`` for fp8 and the
  KV-cache quantization), speculative and Medusa decoding (a draft model), LoRA (adapters);
- Trn-only parallelism (``logical_nc_config``, context, data, expert and pipeline degrees).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from eks_inference.specification.validation import Problems

# The dtypes NeuronConfig's to_torch_dtype accepts for its dtype options (fp8 needs the
# quantization left out above).
TorchDtype = Literal["bfloat16", "float16", "float32"]
# Bucket lengths, in tokens; the deployment's rules hold each to its max_model_len. A
# power-of-two ladder up to the longest context has 25 rungs, so 64 buckets leave room for
# any hand-made list.
_Bucket = Annotated[int, Field(ge=1)]
_Buckets = Annotated[list[_Bucket], Field(min_length=1, max_length=64)]
# Module and weight names of a checkpoint (``layers.0.mlp``): a few per layer of the largest
# models.
_ModuleName = Annotated[str, Field(min_length=1, max_length=256)]
_Count = Annotated[int, Field(ge=1, le=2**20)]


@with_config(ConfigDict(extra="forbid", strict=True))
class OnDeviceSamplingConfig(TypedDict, total=False):
    """NxD Inference's ``OnDeviceSamplingConfig``: sampling on the Neuron device.

    vLLM Neuron enables it with ``dynamic: true`` (per-request sampling parameters); an
    override replaces that whole default, so keep ``dynamic: true`` unless every request
    samples alike.
    """

    do_sample: bool
    top_k: _Count
    top_p: Annotated[float, Field(gt=0, le=1)]
    temperature: Annotated[float, Field(gt=0, le=100)]
    dynamic: bool
    deterministic: bool
    global_topk: _Count


@with_config(ConfigDict(extra="forbid", strict=True))
class NeuronConfigOverrides(TypedDict, total=False):
    """The NeuronConfig entries ``neuron.overrides`` may set, with their types."""

    # Bucketing: the shapes compiled for context encoding and token generation.
    enable_bucketing: bool
    context_encoding_buckets: _Buckets
    token_generation_buckets: _Buckets
    # Attention.
    flash_decoding_enabled: bool
    fused_qkv: bool
    sequence_parallel_enabled: bool
    qk_layernorm: bool
    attention_dtype: TorchDtype
    # Sampling on the device.
    on_device_sampling_config: OnDeviceSamplingConfig
    # Precision of reductions and of loaded parameters.
    rpl_reduce_dtype: TorchDtype
    cast_type: Literal["config", "as-declared"]
    # Embeddings, compilation and loading.
    vocab_parallel: bool
    async_mode: bool
    cc_pipeline_tiling_factor: _Count
    scratchpad_page_size: _Count
    save_sharded_checkpoint: bool
    skip_warmup: bool
    weights_to_skip_layout_optimization: Annotated[list[_ModuleName], Field(max_length=4096)]
    # Debugging: logits beside the sampled tokens (slower).
    output_logits: bool


# NeuronConfig keys vLLM Neuron sets from vLLM's arguments, which the charts derive from the
# spec; each maps to what to change instead.
SPEC_OWNED_KEYS: dict[str, str] = {
    "tp_degree": "tensor_parallel_size",
    **dict.fromkeys(
        (
            "batch_size",
            "ctx_batch_size",
            "tkg_batch_size",
            "max_batch_size",
            "kv_cache_batch_size",
            "is_continuous_batching",
        ),
        "limits.max_num_seqs",
    ),
    **dict.fromkeys(
        (
            "seq_len",
            "max_context_length",
            "max_length",
            "max_new_tokens",
            "n_positions",
            "n_active_tokens",
        ),
        "limits.max_model_len",
    ),
    "torch_dtype": "the model's dtype (model.architecture.dtype)",
    **dict.fromkeys(
        ("pa_num_blocks", "pa_block_size", "is_block_kv_layout", "is_prefix_caching"),
        "limits (the charts size the KV cache blocks and turn prefix caching off)",
    ),
}

ALLOWED_KEYS = tuple(NeuronConfigOverrides.__annotations__)


def _check_keys(value: Any) -> Any:
    """Name each key that is not allowed, with the field to set instead where the spec owns it.

    Types are checked afterwards by :class:`NeuronConfigOverrides`.
    """
    if not isinstance(value, dict):
        return value
    problems = Problems("NeuronConfigOverrides")
    for key in value:
        if key in ALLOWED_KEYS:
            continue
        owner = SPEC_OWNED_KEYS.get(key)
        if owner is not None:
            message = f"{key!r} is set from {owner}; set that instead of an override"
        else:
            message = (
                f"{key!r} is not an override this library passes to NeuronConfig on Inf2 "
                f"(Neuron SDK 2.31); allowed: {', '.join(ALLOWED_KEYS)}"
            )
        problems.add((str(key),), message, key)
    problems.raise_if_any()
    return value


NeuronOverrides = Annotated[NeuronConfigOverrides, BeforeValidator(_check_keys)]
"""``neuron.overrides``: allowed NeuronConfig keys only, each with its type."""
