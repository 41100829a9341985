"""The preflight result as a rich table, failures first in colour but readable without it."""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape
from rich.table import Table

from eks_inference.ops.preflight import Check

_STYLE = {"PASS": "green", "FAIL": "bold red", "SKIP": "yellow"}


def preflight_table(checks: Sequence[Check]) -> Table:
    """One row per check, in the order run; the status column is plain text (PASS/FAIL/SKIP)."""
    failed = sum(c.failed for c in checks)
    table = Table(
        title=f"Preflight: {len(checks) - failed} passed, {failed} failed",
        title_justify="left",
    )
    table.add_column("scope", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for check in checks:
        table.add_row(
            escape(check.scope),
            escape(check.check),
            f"[{_STYLE[check.status]}]{check.status}[/]",
            escape(check.detail),
        )
    return table
