"""The Serve application's arguments: :class:`ServerConfig`, validated when it is built.

The chart renders these ``args`` into the Serve config (``eks_inference.charts.engine``); they
are checked here, on the Ray head, so that a wrong one fails before any replica is scheduled.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# An environment variable's name, as the chart writes them: the API key's variable.
ENV_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]*$"


class ServerConfig(BaseModel):
    """The ``args`` of the Serve application, validated when the application is built.

    Every key is required and unknown keys are rejected, so a Serve config written for another
    version of this file fails on the Ray head with a message naming the key, instead of on an
    Inferentia node after minutes of model loading.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    model: str = Field(min_length=1, description="Local path of the model weights.")
    served_model_name: str = Field(min_length=1, description="Model id clients send.")
    tensor_parallel_size: int = Field(gt=0)
    max_model_len: int = Field(gt=0)
    max_num_seqs: int = Field(gt=0, description="Compiled batch size on Neuron.")
    block_size: int = Field(gt=0)
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        description="Weights and activations dtype; part of the compiled graph, so it must be "
        "the dtype the artifacts were compiled for (standalone vLLM passes the same --dtype)."
    )
    additional_config: dict[str, Any] = Field(
        description="vLLM additional_config for the Neuron plugin (override_neuron_config)."
    )
    api_key_env: str | None = Field(
        default=None,
        pattern=ENV_NAME_PATTERN,
        description="Environment variable holding the API key /v1 routes require; none: no "
        "key. The chart always passes it.",
    )

    @field_validator("additional_config")
    @classmethod
    def _override_is_mapping(cls, value: dict[str, Any]) -> dict[str, Any]:
        override = value.get("override_neuron_config")
        if override is not None and not isinstance(override, dict):
            raise ValueError("override_neuron_config must be a mapping")
        return value

    @model_validator(mode="after")
    def _block_fits_context(self) -> "ServerConfig":
        if self.block_size > self.max_model_len:
            raise ValueError(
                f"block_size ({self.block_size}) must not exceed max_model_len "
                f"({self.max_model_len})"
            )
        return self

    def kv_cache_settings(self) -> dict[str, Any]:
        """vLLM KV-cache settings implied by ``block_size``.

        ``block_size == max_model_len`` means one block per sequence: the contiguous KV cache
        the Neuron plugin uses without prefix caching, where it needs exactly ``max_num_seqs``
        blocks (``num_gpu_blocks_override``). vLLM turns prefix caching on by default, which
        would make the plugin compile a block-KV model instead, so it is switched off here to
        match artifacts compiled for the contiguous layout. A smaller ``block_size`` asks for
        the paged, block-KV layout with prefix caching.
        """
        if self.block_size == self.max_model_len:
            return {"enable_prefix_caching": False, "num_gpu_blocks_override": self.max_num_seqs}
        return {"enable_prefix_caching": True}
