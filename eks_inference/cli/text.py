"""Small wording helpers shared by the commands' output."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(size: float) -> str:
    """``1536`` -> ``1.5 KiB``: binary units, one decimal, the largest unit below 1024."""
    value = float(size)
    for unit in _UNITS[:-1]:
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_UNITS[-1]}"


def plural(count: int, noun: str) -> str:
    """``plural(1, "file")`` -> ``1 file``; ``plural(2, "file")`` -> ``2 files``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
