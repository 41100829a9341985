"""The cells of the plan's LoRA adapter table: a replica's slots, their memory and the KV
tokens they cost (:class:`~eks_inference.ops.plan.AdapterSlots`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eks_inference.ops.plan import DeploymentPlan

ADAPTER_HEADERS = (
    "deployment",
    "adapters",
    "slots",
    "max rank",
    "slots GiB",
    "KV tokens left",
    "KV tokens cost",
    "host cache",
)


def adapter_rows(d: DeploymentPlan) -> list[list[str]]:
    """A replica's LoRA slots: their GPU memory, the KV tokens left and what they cost, and
    the adapters kept in host memory."""
    a = d.adapters
    if a is None:
        return []
    return [
        [
            d.name,
            str(a.adapters),
            str(a.slots),
            str(a.max_lora_rank),
            f"{a.gib:.2f}",
            f"{a.kv_tokens:,}",
            f"{a.kv_tokens_cost:,}",
            f"{a.cpu_loras} ({a.cpu_gib:.1f} GiB)",
        ]
    ]


#: The columns of the table right-aligned as numbers.
ADAPTER_NUMERIC = ADAPTER_HEADERS[1:-1]
