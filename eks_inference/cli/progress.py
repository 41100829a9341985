"""Byte-counting progress bars on a terminal, and silence elsewhere (logs get the summary).

Each bar is fed through an :data:`~eks_inference.ops.progress.Advance` callback, the way the
operations report progress.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from eks_inference.ops.progress import Advance

# Seconds without a byte moving before a bar says so: a healthy transfer reports several times
# a second, and a stalled request is retried after its timeout.
STALL_AFTER_S = 5.0


def _ignore(_: int) -> None:
    """Progress sink when no bar is shown."""


class ByteProgress:
    """Creates one bar per phase (hashing, uploading) and returns its advance callback."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress

    def task(self, description: str, total: int) -> Advance:
        """Start a bar for ``total`` bytes; the callback advances it (a no-op off a terminal)."""
        progress = self._progress
        if progress is None:
            return _ignore
        task_id = progress.add_task(description, total=total, last_progress=time.monotonic())

        def advance(n: int) -> None:
            progress.update(task_id, advance=n, last_progress=time.monotonic())

        return advance


class StallColumn(ProgressColumn):
    """``no progress for N s`` once a bar has not moved for :data:`STALL_AFTER_S`.

    A hung endpoint is then visible while the request waits for its timeout and retries,
    instead of a bar that merely stops.
    """

    def render(self, task: Task) -> Text:
        last = task.fields.get("last_progress")
        if task.finished or not isinstance(last, float):
            return Text("")
        idle = time.monotonic() - last
        if idle < STALL_AFTER_S:
            return Text("")
        return Text(f"no progress for {idle:.0f} s", style="yellow")


@contextmanager
def byte_progress(console: Console) -> Iterator[ByteProgress]:
    """Bars on ``console`` when it is a terminal; a redrawing bar would clutter a log file."""
    if not console.is_terminal:
        yield ByteProgress(None)
        return
    with Progress(
        TextColumn("{task.description:>10}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        StallColumn(),
        console=console,
    ) as progress:
        yield ByteProgress(progress)
