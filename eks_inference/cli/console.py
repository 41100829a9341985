"""Rich consoles that stay readable when output is not a terminal (pipes, CI, tests)."""

from __future__ import annotations

import os
import sys

from rich.console import Console

# Without a terminal rich falls back to 80 columns and wraps table cells mid-word; a wide,
# fixed width keeps each table row on one line in logs. COLUMNS still wins when set.
_NON_TERMINAL_WIDTH = 200


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    console = Console(file=stream, highlight=False, soft_wrap=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(file=stream, highlight=False, soft_wrap=False, width=_NON_TERMINAL_WIDTH)
    return console


def stdout() -> Console:
    """A console on the current ``sys.stdout`` (created per call: test runners swap it)."""
    return _console(stderr=False)


def stderr() -> Console:
    """A console on the current ``sys.stderr``, for progress bars and notes."""
    return _console(stderr=True)
