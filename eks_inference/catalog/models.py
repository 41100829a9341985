"""Model architectures, as data: the numbers sizing needs, from each model's ``config.json``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

Dtype = Literal["bfloat16", "float16", "float32"]
DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}
# Bounds far beyond the largest published models (Llama 3.1 405B: 126 layers, hidden size
# 16384, 128 heads; vocabularies of 256K; about 2T parameters): an absurd value fails as a
# field error instead of in the sizing arithmetic (10**400 parameters overflow a float).
_Dimension = Annotated[int, Field(ge=1, le=2**24)]
_Parameters = Annotated[int, Field(ge=1, le=10**14)]


class ModelArchitecture(BaseModel):
    """The shape of a decoder-only transformer, enough to size its weights and KV cache.

    ``head_dim`` defaults to ``hidden_size / num_attention_heads``; set it where the model's
    config has its own (Gemma). ``family`` drives compatibility rules (Gemma compiles poorly on
    Neuron). ``max_position_embeddings`` is the longest context the model supports, which
    bounds every deployment's ``max_model_len``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str = Field(min_length=1, description="Architecture family, e.g. llama, gemma2.")
    num_layers: _Dimension
    hidden_size: _Dimension
    num_attention_heads: _Dimension
    num_kv_heads: _Dimension
    head_dim: _Dimension | None = None
    vocab_size: _Dimension
    intermediate_size: _Dimension | None = Field(
        default=None,
        description="Width of the MLP (config.json's intermediate_size); sizes LoRA adapter "
        "slots, which vLLM allocates for the MLP projections too.",
    )
    num_parameters: _Parameters = Field(description="Total parameter count.")
    max_position_embeddings: PositiveInt = Field(
        description="Longest context the model supports, in tokens: config.json's "
        "max_position_embeddings, which vLLM derives its largest max_model_len from (times "
        "the factor when the config enables YaRN-style rope_scaling)."
    )
    dtype: Dtype = "bfloat16"
    fp8_parameters: int = Field(
        default=0,
        ge=0,
        le=10**14,
        description="Parameters the checkpoint stores in FP8 (one byte each), the rest at "
        "dtype: a quantized checkpoint's linear layers. 0: none (the KV cache stays at dtype "
        "either way).",
    )

    @model_validator(mode="after")
    def _heads_are_consistent(self) -> ModelArchitecture:
        if self.fp8_parameters > self.num_parameters:
            raise ValueError(
                f"fp8_parameters ({self.fp8_parameters}) exceeds num_parameters "
                f"({self.num_parameters})"
            )
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                "hidden_size is not divisible by num_attention_heads; give head_dim explicitly"
            )
        return self

    def context_length_problem(self, max_model_len: int) -> str | None:
        """Why ``max_model_len`` is too long for this model, or None.

        vLLM refuses a longer ``max_model_len`` at start-up on GPUs; the Neuron plugin skips
        that check, and positions the model was never trained on give garbage or NaN.
        """
        if max_model_len <= self.max_position_embeddings:
            return None
        return (
            f"max_model_len {max_model_len} exceeds the {self.max_position_embeddings} tokens "
            f"the model supports (max_position_embeddings); set max_model_len <= "
            f"{self.max_position_embeddings}"
        )

    @property
    def effective_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.dtype]


class CatalogModel(BaseModel):
    """A catalog entry: the Hugging Face id the weights come from and the architecture."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hf_id: str
    architecture: ModelArchitecture


MODELS: dict[str, CatalogModel] = {
    "llama-3-8b": CatalogModel(
        hf_id="meta-llama/Meta-Llama-3-8B-Instruct",
        architecture=ModelArchitecture(
            family="llama",
            num_layers=32,
            hidden_size=4096,
            num_attention_heads=32,
            num_kv_heads=8,
            vocab_size=128256,
            intermediate_size=14336,
            num_parameters=8_030_261_248,
            max_position_embeddings=8192,
        ),
    ),
    "llama-3.1-70b": CatalogModel(
        hf_id="meta-llama/Llama-3.1-70B-Instruct",
        architecture=ModelArchitecture(
            family="llama",
            num_layers=80,
            hidden_size=8192,
            num_attention_heads=64,
            num_kv_heads=8,
            vocab_size=128256,
            intermediate_size=28672,
            num_parameters=70_553_706_496,
            # rope_scaling of type llama3 is built into the 131072; vLLM does not scale it.
            max_position_embeddings=131072,
        ),
    ),
    "mistral-7b": CatalogModel(
        hf_id="mistralai/Mistral-7B-Instruct-v0.1",
        architecture=ModelArchitecture(
            family="mistral",
            num_layers=32,
            hidden_size=4096,
            num_attention_heads=32,
            num_kv_heads=8,
            vocab_size=32000,
            intermediate_size=14336,
            num_parameters=7_241_732_096,
            # v0.1 attends over a 4096-token sliding window; vLLM caps max_model_len at the
            # window only with --disable-sliding-window, which the charts never pass.
            max_position_embeddings=32768,
        ),
    ),
    "qwen2.5-7b": CatalogModel(
        hf_id="Qwen/Qwen2.5-7B-Instruct",
        architecture=ModelArchitecture(
            family="qwen2",
            num_layers=28,
            hidden_size=3584,
            num_attention_heads=28,
            num_kv_heads=4,
            vocab_size=152064,
            intermediate_size=18944,
            num_parameters=7_615_616_512,
            # 131072 only with YaRN rope_scaling added to config.json; the published config
            # has none.
            max_position_embeddings=32768,
        ),
    ),
    "gemma-2-9b": CatalogModel(
        hf_id="google/gemma-2-9b-it",
        architecture=ModelArchitecture(
            family="gemma2",
            num_layers=42,
            hidden_size=3584,
            num_attention_heads=16,
            num_kv_heads=8,
            head_dim=256,
            vocab_size=256000,
            intermediate_size=14336,
            num_parameters=9_241_705_984,
            max_position_embeddings=8192,
        ),
    ),
}

# Llama 3.1 405B (config.json of meta-llama/Llama-3.1-405B-Instruct): 126 layers, hidden size
# 16384, 128 heads, 8 KV heads, intermediate size 53248, vocabulary 128256, untied embeddings;
# the parameter count follows from them (405,853,388,800, as the model card's 405B). The FP8
# checkpoint (meta-llama/Llama-3.1-405B-Instruct-FP8, FBGEMM row-wise FP8) quantizes the
# feed-forward weights of every layer but the first and the last, and no attention weights
# (the Llama 3 paper, "FP8 quantization"): 124 x 3 x 16384 x 53248 parameters in one byte.
_LLAMA_405B = {
    "family": "llama",
    "num_layers": 126,
    "hidden_size": 16384,
    "num_attention_heads": 128,
    "num_kv_heads": 8,
    "vocab_size": 128256,
    "num_parameters": 405_853_388_800,
    # rope_scaling of type llama3 is built into the 131072; vLLM does not scale it.
    "max_position_embeddings": 131072,
}
_LLAMA_405B_FP8_PARAMETERS = 124 * 3 * 16384 * 53248
MODELS["llama-3.1-405b"] = CatalogModel(
    hf_id="meta-llama/Llama-3.1-405B-Instruct",
    architecture=ModelArchitecture.model_validate(_LLAMA_405B),
)
MODELS["llama-3.1-405b-fp8"] = CatalogModel(
    hf_id="meta-llama/Llama-3.1-405B-Instruct-FP8",
    architecture=ModelArchitecture.model_validate(
        {**_LLAMA_405B, "fp8_parameters": _LLAMA_405B_FP8_PARAMETERS}
    ),
)
# Qwen3-Coder-480B-A35B-Instruct, a mixture of experts (config.json of
# Qwen/Qwen3-Coder-480B-A35B-Instruct, Qwen3MoeForCausalLM): 62 layers, hidden size 6144, 96
# query heads and 8 KV heads of head_dim 128 (so head_dim is given: 6144 / 96 is 64), 160
# experts of moe_intermediate_size 2560 with 8 routed per token, vocabulary 151936, untied
# embeddings, max_position_embeddings 262144, bfloat16. Parameters from those figures:
# 480,154,875,392 (the model card's 480B, 35B active). Every expert's weights are resident, so
# memory is sized on all of them.
MODELS["qwen3-coder-480b"] = CatalogModel(
    hf_id="Qwen/Qwen3-Coder-480B-A35B-Instruct",
    architecture=ModelArchitecture(
        family="qwen3_moe",
        num_layers=62,
        hidden_size=6144,
        num_attention_heads=96,
        num_kv_heads=8,
        head_dim=128,
        vocab_size=151936,
        num_parameters=480_154_875_392,
        max_position_embeddings=262144,
    ),
)

# Families whose mixed attention configurations fail or compile poorly with neuronx-cc.
NEURON_POOR_COMPILE_FAMILIES = frozenset({"gemma", "gemma2", "gemma3"})
