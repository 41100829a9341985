"""Render plans as rich tables (terminal) and Markdown (``k8s_manifests/PLAN.md``).

The cells and notes both show are :mod:`eks_inference.cli.plan_cells`. The Markdown is a pure
function of the platform file, with no timestamps, so the committed ``PLAN.md`` changes
exactly when the plan does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from eks_inference.cli.plan_cells import (
    BOUND_NOTE,
    COLD_START_HEADERS,
    DEPLOYMENT_HEADERS,
    KV_TIER_HEADERS,
    NUMERIC,
    POOL_HEADERS,
    SCALE_TO_ZERO_HEADERS,
    SCALE_TO_ZERO_NOTE,
    WATCH_HEADERS,
    WATCH_NOTE,
    cold_start_rows,
    deployment_cells,
    fit,
    kv_tier_rows,
    memory,
    money,
    pool_cells,
    rate,
    scale_to_zero_rows,
    watch_rows,
)

if TYPE_CHECKING:
    from eks_inference.ops.plan import ConfigurationPlan, PlatformPlan


def _table(title: str, headers: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left")
    for header in headers:
        table.add_column(header, justify="right" if header in NUMERIC else "left", no_wrap=True)
    return table


def platform_tables(plan: PlatformPlan) -> list[Table]:
    """Deployments, node pools with the cluster's hourly range, what to watch, and the
    plan's warnings (scarce or unpriced spot capacity) when there are any."""
    deployments = _table("Deployments", DEPLOYMENT_HEADERS)
    for d in plan.deployments:
        deployments.add_row(*deployment_cells(d), style=None if d.configuration.fits else "red")
    pools = _table("Node pools", POOL_HEADERS)
    for p in plan.pools:
        pools.add_row(*pool_cells(p))
    pools.add_section()
    pools.add_row(
        "cluster", "", "", "", "", money(plan.price_per_hour_min), money(plan.price_per_hour_max)
    )
    # Long cells (metric names, consequences) wrap rather than being cut.
    watch = Table(title="What to watch", title_justify="left")
    for header in WATCH_HEADERS:
        watch.add_column(header, overflow="fold", no_wrap=header == "deployment")
    for d in plan.deployments:
        for row in watch_rows(d):
            watch.add_row(*row)
        watch.add_section()
    cold = _table("Cold start (new node, seconds)", COLD_START_HEADERS)
    for d in plan.deployments:
        for row in cold_start_rows(d):
            cold.add_row(*row)
        cold.add_section()
    tables = [deployments, pools, watch, cold]
    idle = [row for d in plan.deployments for row in scale_to_zero_rows(d)]
    if idle:
        zero = _table(
            "Scale to zero (first request after idle, idle savings)", SCALE_TO_ZERO_HEADERS
        )
        for row in idle:
            zero.add_row(*row)
        tables.append(zero)
    tiered = [d for d in plan.deployments if d.kv_tiers]
    if tiered:
        tiers = _table("KV cache tiers (per replica)", KV_TIER_HEADERS)
        for d in tiered:
            for row in kv_tier_rows(d):
                tiers.add_row(*row)
        tables.append(tiers)
    if plan.warnings:
        warnings = Table(title="Warnings", title_justify="left", show_header=False)
        warnings.add_column("", overflow="fold", style="yellow")
        for warning in plan.warnings:
            warnings.add_row(warning)
        tables.append(warnings)
    return tables


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
                f"{plan.nodes_per_replica} nodes, {plan.gpus_per_replica} GPUs "
                f"(TP {plan.tensor_parallel_size} x PP {plan.nodes_per_replica}), "
                f"{money(plan.price_per_hour * plan.nodes_per_replica)}/h",
            ),
        )
    for key, value in rows:
        table.add_row(key, value)
    return table


def _markdown_table(headers: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    align = ["---:" if h in NUMERIC else "---" for h in headers]
    return [
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _kv_tier_markdown(plan: PlatformPlan) -> list[str]:
    rows = [row for d in plan.deployments for row in kv_tier_rows(d)]
    if not rows:
        return []
    return ["## KV cache tiers (per replica)", "", *_markdown_table(KV_TIER_HEADERS, rows), ""]


def _scale_to_zero_markdown(plan: PlatformPlan) -> list[str]:
    rows = [row for d in plan.deployments for row in scale_to_zero_rows(d)]
    if not rows:
        return []
    return [
        "## Scale to zero",
        "",
        SCALE_TO_ZERO_NOTE,
        "",
        *_markdown_table(SCALE_TO_ZERO_HEADERS, rows),
        "",
    ]


def platform_markdown(plan: PlatformPlan, source: str) -> str:
    """The platform plan as Markdown; ``source`` names the platform file it was made from."""
    lines = [
        "# Capacity and cost plan",
        "",
        f"Generated by `eks-inference plan --markdown` from `{source}`; do not edit.",
        "",
        "## Deployments",
        "",
        *_markdown_table(DEPLOYMENT_HEADERS, [deployment_cells(d) for d in plan.deployments]),
        "",
        "## Node pools",
        "",
        *_markdown_table(
            POOL_HEADERS,
            [pool_cells(p) for p in plan.pools]
            + [
                [
                    "**cluster**",
                    "",
                    "",
                    "",
                    "",
                    money(plan.price_per_hour_min),
                    money(plan.price_per_hour_max),
                ]
            ],
        ),
        "",
        *_kv_tier_markdown(plan),
        *_scale_to_zero_markdown(plan),
        *(f"**Warning**: {warning}" + "\n" for warning in plan.warnings),
        BOUND_NOTE,
        "",
        "## What to watch",
        "",
        WATCH_NOTE,
        "",
        *_markdown_table(
            WATCH_HEADERS,
            [
                [cell.replace("|", "\\|") for cell in row]
                for d in plan.deployments
                for row in watch_rows(d)
            ],
        ),
        "",
    ]
    return "\n".join(lines)
