"""Rich consoles that stay readable when output is not a terminal (pipes, CI, tests), and
that never pass a terminal escape from the text they print to the terminal.

rich is imported when the first console is made, not at start-up: commands that print plain
lines (``manifests``, ``schema``, every error) never load it.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING, Any

import typer

from eks_inference.ops.text import printable, redact_urls

if TYPE_CHECKING:
    from rich.console import Console

# Without a terminal rich falls back to COLUMNS or 80 columns and wraps table cells mid-word;
# a log has no width, so tables get at least this many columns there and keep one line per
# row. A larger COLUMNS widens it further.
_NON_TERMINAL_WIDTH = 200


def terminal_safe(text: str) -> str:
    """What any printer of the CLI writes for ``text``: URL credentials redacted and escapes
    shown escaped (lines and tabs kept). The last line of defence; text from outside should
    already have gone through :func:`~eks_inference.ops.text.quote_external` where it was put
    into a message."""
    return printable(redact_urls(text), keep_lines=True)


@functools.cache
def _safe_console_class() -> type[Console]:
    from rich.console import Console
    from rich.text import Text

    class SafeConsole(Console):
        """A console whose every string passes through :func:`terminal_safe`.

        rich turns each ``str`` it prints (table cells and titles included) into ``Text``
        here, before measuring it, so escaped characters are laid out at their printed width;
        rich itself strips only a few control codes and lets ESC through. The styles the CLI
        asks for are applied after this, so colours still work on a terminal.
        """

        def render_str(self, text: str, **options: Any) -> Text:
            return super().render_str(terminal_safe(text), **options)

    return SafeConsole


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    safe_console = _safe_console_class()
    console = safe_console(file=stream, highlight=False, soft_wrap=False)
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    width = max(int(columns) if columns.isdigit() else 0, _NON_TERMINAL_WIDTH)
    return safe_console(file=stream, highlight=False, soft_wrap=False, width=width)


def stdout() -> Console:
    """A console on the current ``sys.stdout`` (created per call: test runners swap it)."""
    return _console(stderr=False)


def stderr() -> Console:
    """A console on the current ``sys.stderr``, for progress bars and notes."""
    return _console(stderr=True)


def echo(message: str, *, err: bool = False) -> None:
    """Print a plain line (no rich markup) through :func:`terminal_safe`:
    the way for messages that quote names from outside (file names, keys, URLs)."""
    typer.echo(terminal_safe(message), err=err)
