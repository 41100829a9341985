"""Byte-counting progress bars on a terminal, and silence elsewhere (logs get the summary)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

# Called with a byte count as work progresses; negative when the transfer manager rewinds a
# retried part.
Advance = Callable[[int], None]


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
        task_id = progress.add_task(description, total=total)

        def advance(n: int) -> None:
            progress.advance(task_id, n)

        return advance


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
        console=console,
    ) as progress:
        yield ByteProgress(progress)
