"""LoRA adapters a deployment serves beside its base model, typed.

``adapters`` (:class:`Adapters`) names a bucket prefix holding one folder per adapter
(``<prefix><name>/adapter_config.json`` and the weights, as PEFT saves them), how many adapters
share the GPUs at once and at what largest rank, and which adapters are served: ``preload``
adapters are registered when the server starts (vLLM's ``--lora-modules``), ``on_demand``
ones are found by name on their first request (vLLM's filesystem LoRA resolver). Clients name
an adapter as they name the base model, in the request's ``model``.

Only an engine with the :class:`~eks_inference.specification.capabilities.ServesAdapters`
capability accepts the field; its memory comes out of the same fit as the weights and the KV
cache (:func:`eks_inference.catalog.sizing.lora_slot_bytes`), whose rules are
:mod:`eks_inference.specification.adapters_rules`'.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from eks_inference.specification.aws_types import KeyPrefix
from eks_inference.specification.validation import Problems, rule_error

#: The ranks ``--max-lora-rank`` accepts in the pinned GPU vLLM (0.34.0: ``MaxLoRARanks`` of
#: ``vllm/config/lora.py``; the recorded options table lists them as its choices).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# Far beyond what one GPU group holds (each slot is tens of MiB at the smallest ranks): a
# few zeros too many fail as a field error, not as sizing arithmetic.
MAX_LORA_SLOTS = 256
MAX_CPU_LORAS = 4096
MAX_LISTED_ADAPTERS = 256
#: The file PEFT writes beside an adapter's weights, which vLLM reads its rank, base model and
#: target modules from.
ADAPTER_CONFIG_NAME = "adapter_config.json"
ADAPTER_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$"


def _vllm_lora_rank(value: int) -> int:
    if value not in VLLM_LORA_RANKS:
        raise rule_error(
            f"max_lora_rank {value} is not a rank vLLM accepts; use one of {list(VLLM_LORA_RANKS)}"
        )
    return value


AdapterName = Annotated[
    str,
    Field(
        pattern=ADAPTER_NAME_PATTERN,
        description="Folder under the prefix, and the model name clients send.",
    ),
]
LoraRank = Annotated[int, AfterValidator(_vllm_lora_rank)]


class Adapters(BaseModel):
    """LoRA adapters of the deployment's base model, read from the model bucket.

    ``max_loras`` adapters run in one batch (GPU slots, each sized at ``max_lora_rank``);
    ``max_cpu_loras`` stay loaded in host memory (default ``max_loras``, vLLM's), so that
    swapping one into a slot reads no file. Defaults are vLLM's: one slot of rank 16.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix: KeyPrefix = Field(
        description="Bucket prefix holding one folder per adapter, ending '/'; the servers "
        "mount it read-only, and the Mountpoint driver may read it and nothing beside."
    )
    max_loras: int = Field(
        default=1, ge=1, le=MAX_LORA_SLOTS, description="Adapters in one batch (GPU slots)."
    )
    max_lora_rank: LoraRank = Field(
        default=16,
        description=f"Largest adapter rank the slots hold, one of {list(VLLM_LORA_RANKS)}.",
    )
    max_cpu_loras: int | None = Field(
        default=None,
        ge=1,
        le=MAX_CPU_LORAS,
        description="Adapters kept in host memory; default max_loras, at least max_loras.",
    )
    preload: tuple[AdapterName, ...] = Field(
        default=(),
        max_length=MAX_LISTED_ADAPTERS,
        description="Adapters registered at start-up (--lora-modules).",
    )
    on_demand: tuple[AdapterName, ...] = Field(
        default=(),
        max_length=MAX_LISTED_ADAPTERS,
        description="Adapters resolved by name on their first request (vLLM's filesystem "
        "LoRA resolver); preflight checks each folder.",
    )

    @model_validator(mode="after")
    def _check_names_and_cache(self) -> Adapters:
        problems = Problems("Adapters")
        if not self.preload and not self.on_demand:
            problems.add(
                ("preload",),
                "no adapter is served; list adapter folders under preload or on_demand",
            )
        seen: set[str] = set()
        for field, names in (("preload", self.preload), ("on_demand", self.on_demand)):
            for name in names:
                if name in seen:
                    problems.add(
                        (field,),
                        f"adapter {name!r} is listed twice; list each adapter once",
                        name,
                    )
                seen.add(name)
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            problems.add(
                ("max_cpu_loras",),
                f"max_cpu_loras ({self.max_cpu_loras}) is below max_loras ({self.max_loras}); "
                f"vLLM refuses it: set max_cpu_loras >= {self.max_loras} or remove it",
                self.max_cpu_loras,
            )
        problems.raise_if_any()
        return self

    @property
    def names(self) -> tuple[str, ...]:
        """Every adapter served, preloaded first."""
        return (*self.preload, *self.on_demand)

    @property
    def cpu_loras(self) -> int:
        """Adapters kept in host memory (vLLM's default: ``max_loras``)."""
        return self.max_cpu_loras or self.max_loras

    def folder(self, name: str) -> str:
        """The bucket prefix of adapter ``name``: ``<prefix><name>/``."""
        return f"{self.prefix}{name}/"
