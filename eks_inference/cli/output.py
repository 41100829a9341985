"""Where a command's text goes: the terminal, or the file its ``--output`` names."""

from __future__ import annotations

from pathlib import Path

import typer

from eks_inference.ops.errors import CommandFailed


def emit(text: str, output: Path | None) -> None:
    """Print ``text``, or write it to ``output`` (creating its directory)."""
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text if text.endswith("\n") else text + "\n")
    except OSError as error:
        raise CommandFailed(f"cannot write {output}: {error.strerror or error}") from None
    typer.echo(f"wrote {output}", err=True)
