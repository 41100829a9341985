"""One configuration of ``plan --model ... --instance-type ...``: its table, and why it cannot
be served when it does not fit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from eks_inference.cli.plan_cells import fit, memory, money, rate

if TYPE_CHECKING:
    from eks_inference.ops.plan import ConfigurationPlan


# What the cost of a configuration that does not fit is shown as: it serves nothing.
_NO_COST = "none: does not fit"


def does_not_fit(plan: ConfigurationPlan, fitting_degree: int | None) -> str:
    """Why ``plan`` cannot be served, on one line, with what to change: ``fitting_degree``, a
    larger tensor-parallel degree of the same instance type that fits, when there is one."""
    fix = f"use --tensor-parallel {fitting_degree}, " if fitting_degree else ""
    return (
        f"{plan.model} does not fit on {plan.label}: {plan.required_gib:.1f} GiB needed, "
        f"{plan.usable_memory_gib:.1f} GiB usable at max_model_len {plan.max_model_len} and "
        f"max_num_seqs {plan.max_num_seqs}; {fix}lower --max-model-len or --max-num-seqs, or "
        "see --plot for the configurations that fit"
    )


def configuration_table(plan: ConfigurationPlan) -> Table:
    """One configuration as a two-column table."""
    table = Table(title=f"{plan.model} on {plan.label}", title_justify="left", show_header=False)
    table.add_column("", no_wrap=True)
    table.add_column("", no_wrap=True)
    source = "measured" if plan.throughput_source == "measured" else "decode bound"
    rows = [
        ("fits", fit(plan)),
        ("weights", f"{plan.weights_gib:.1f} GiB"),
        (
            "KV cache",
            f"{plan.kv_cache_gib:.1f} GiB ({plan.max_num_seqs} seqs x {plan.max_model_len} tokens)",
        ),
        ("memory", memory(plan)),
        ("usable memory", f"{plan.usable_memory_gib:.1f} GiB"),
        ("replicas per node", str(plan.replicas_per_node)),
        ("decode bound (node)", f"{rate(plan.decode_tokens_per_second_bound)} tok/s"),
        ("price per node", f"{money(plan.price_per_hour)}/h ({plan.price_source})"),
        ("throughput used", f"{rate(plan.tokens_per_second)} tok/s ({source})"),
        ("$ per 1M tokens", money(plan.cost_per_million_tokens) if plan.fits else _NO_COST),
    ]
    if plan.padding_gib > 0:
        # NxD Inference pads attention heads up to a multiple of TP; memory counts them.
        rows.insert(3, ("head padding", f"{plan.padding_gib:.1f} GiB"))
    if plan.nodes_per_replica > 1:
        # A replica across nodes: its group, and what the group costs.
        rows.insert(
            1,
            (
                "group per replica",
                f"{plan.nodes_per_replica} nodes, {plan.accelerators_per_replica} GPUs "
                f"(TP {plan.tensor_parallel_size} x PP {plan.nodes_per_replica}), "
                f"{money(plan.price_per_hour * plan.nodes_per_replica)}/h",
            ),
        )
    for key, value in rows:
        table.add_row(key, value)
    return table
