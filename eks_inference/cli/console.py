"""Rich consoles that stay readable when output is not a terminal (pipes, CI, tests)."""

from __future__ import annotations

import os
import sys

from rich.console import Console

# Without a terminal rich falls back to COLUMNS or 80 columns and wraps table cells mid-word;
# a log has no width, so tables get at least this many columns there and keep one line per
# row. A larger COLUMNS widens it further.
_NON_TERMINAL_WIDTH = 200


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    console = Console(file=stream, highlight=False, soft_wrap=False)
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    width = max(int(columns) if columns.isdigit() else 0, _NON_TERMINAL_WIDTH)
    return Console(file=stream, highlight=False, soft_wrap=False, width=width)


def stdout() -> Console:
    """A console on the current ``sys.stdout`` (created per call: test runners swap it)."""
    return _console(stderr=False)


def stderr() -> Console:
    """A console on the current ``sys.stderr``, for progress bars and notes."""
    return _console(stderr=True)
