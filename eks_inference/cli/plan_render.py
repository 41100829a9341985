"""Render plans as rich tables (terminal) and Markdown (``k8s_manifests/PLAN.md``).

The cells and notes both show are :mod:`eks_inference.cli.plan_cells`. The Markdown is a pure
function of the platform file, with no timestamps, so the committed ``PLAN.md`` changes
exactly when the plan does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.table import Table

from eks_inference.cli.plan_adapters import ADAPTER_HEADERS, adapter_rows
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
    kv_tier_rows,
    money,
    pool_cells,
    scale_to_zero_rows,
    watch_rows,
)
from eks_inference.cli.plan_split import SPLIT_HEADERS, split_rows

if TYPE_CHECKING:
    from eks_inference.ops.plan import DeploymentPlan, PlatformPlan


@dataclass(frozen=True)
class _Section:
    """A table only some plans have: a row per ``rows`` of each deployment, titled ``title``
    in the terminal and under ``heading`` (and ``note``) in Markdown; left out when empty."""

    title: str
    heading: str
    headers: tuple[str, ...]
    rows: Callable[[DeploymentPlan], Iterable[list[str]]]
    note: str | None = None

    def rows_of(self, plan: PlatformPlan) -> list[list[str]]:
        return [row for d in plan.deployments for row in self.rows(d)]


_SCALE_TO_ZERO = _Section(
    "Scale to zero (first request after idle, idle savings)",
    "Scale to zero",
    SCALE_TO_ZERO_HEADERS,
    scale_to_zero_rows,
    SCALE_TO_ZERO_NOTE,
)
_KV_TIERS = _Section(
    "KV cache tiers (per replica)", "KV cache tiers (per replica)", KV_TIER_HEADERS, kv_tier_rows
)
_ADAPTERS = _Section(
    "LoRA adapter slots (per replica)",
    "LoRA adapter slots (per replica)",
    ADAPTER_HEADERS,
    adapter_rows,
)
_SPLIT = _Section(
    "Prefill and decode apart (beside aggregated)",
    "Prefill and decode apart",
    SPLIT_HEADERS,
    split_rows,
)
_TERMINAL_SECTIONS = (_SCALE_TO_ZERO, _KV_TIERS, _ADAPTERS, _SPLIT)
_MARKDOWN_SECTIONS = (_KV_TIERS, _ADAPTERS, _SCALE_TO_ZERO, _SPLIT)


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
    for section in _TERMINAL_SECTIONS:
        rows = section.rows_of(plan)
        if rows:
            table = _table(section.title, section.headers)
            for row in rows:
                table.add_row(*row)
            tables.append(table)
    if plan.warnings:
        warnings = Table(title="Warnings", title_justify="left", show_header=False)
        warnings.add_column("", overflow="fold", style="yellow")
        for warning in plan.warnings:
            warnings.add_row(warning)
        tables.append(warnings)
    return tables


def _markdown_table(headers: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    align = ["---:" if h in NUMERIC else "---" for h in headers]
    return [
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]


def _section_markdown(plan: PlatformPlan, section: _Section) -> list[str]:
    rows = section.rows_of(plan)
    if not rows:
        return []
    note = [section.note, ""] if section.note else []
    return [f"## {section.heading}", "", *note, *_markdown_table(section.headers, rows), ""]


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
        *(line for section in _MARKDOWN_SECTIONS for line in _section_markdown(plan, section)),
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
