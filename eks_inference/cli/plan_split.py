"""The plan's cells of a deployment served with prefill and decode apart, beside the same
model aggregated (the split of :class:`~eks_inference.ops.plan.SplitPlan`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eks_inference.cli.plan_cells import money

if TYPE_CHECKING:
    from eks_inference.ops.plan import DeploymentPlan

SPLIT_HEADERS = (
    "deployment",
    "split",
    "GPUs",
    "nodes",
    "KV transfer",
    "$/h",
    "aggregated",
    "aggregated GPUs",
    "aggregated $/h",
)


def split_rows(d: DeploymentPlan) -> list[list[str]]:
    """With prefill and decode apart: the groups, their GPUs, nodes, KV transfer and cost,
    beside the deployment's aggregated alternative (its own replicas and TP)."""
    split = d.split
    if split is None:
        return []
    groups = ", ".join(f"{name} {n} x TP {tp}" for name, n, tp in split.groups)
    return [
        [
            d.name,
            groups,
            str(split.accelerators),
            str(split.nodes),
            split.transport or "-",
            money(split.price_per_hour),
            f"{split.aggregated_replicas} x TP {split.aggregated_tensor_parallel_size}",
            str(split.aggregated_accelerators),
            money(split.aggregated_price_per_hour),
        ]
    ]
