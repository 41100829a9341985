"""What every printer of the CLI writes: outside text made safe for the terminal."""

from __future__ import annotations

from eks_inference.cli.console import terminal_safe


def test_terminal_safe_keeps_the_layout_of_a_listing() -> None:
    assert terminal_safe("error: 2 problems:\n  http://u:p@h/\x1b[2J") == (
        "error: 2 problems:\n  http://h/\\x1b[2J"
    )
