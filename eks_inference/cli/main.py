"""``eks-inference``: the command-line entry point, registering the command modules.

Each command is a module of this package (:mod:`~eks_inference.cli.plan`,
:mod:`~eks_inference.cli.upload`, :mod:`~eks_inference.cli.preflight`,
:mod:`~eks_inference.cli.leftovers`, :mod:`~eks_inference.cli.models`,
:mod:`~eks_inference.cli.manifests`, :mod:`~eks_inference.cli.schema`), listed in ``--help``
in that order. Commands import what they need when they run (boto3 for ``upload``,
``preflight`` and ``leftovers``, matplotlib for ``plan --plot``, the chart renderer for
``manifests``), so starting the CLI stays fast. Errors print as one line on stderr: exit code
2 for bad input, 1 for a failure.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Sequence
from typing import Any

import typer
from typer.core import TyperGroup
from typer.main import get_command_name

from eks_inference.cli import (
    console,
    leftovers,
    manifests,
    models,
    plan,
    preflight,
    schema,
    upload,
)
from eks_inference.ops.errors import OperationError
from eks_inference.ops.text import printable


class _OneLineErrors(TyperGroup):
    """Print every usage error and failure as one ``error: ...`` line, without a traceback.

    Click's default shows the usage text and a hint around the message (several lines);
    scripts and CI logs read better with the message alone.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except (typer.TyperException, OperationError) as error:
            # Usage errors of the parser and the operations' own errors alike; both may quote
            # what the user or a server gave (a file name with a newline, an escape), so the
            # message is made one printable line.
            console.echo(f"error: {printable(error.format_message())}", err=True)
            sys.exit(error.exit_code)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _root(ctx: typer.Context) -> None:
    """Show the help when no command is given (as a normal exit, not a usage error)."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


# The commands, in the order --help lists them.
_COMMANDS: tuple[Callable[..., None], ...] = (
    plan.plan,
    upload.upload,
    preflight.preflight,
    leftovers.leftovers,
    models.models,
    manifests.manifests,
    schema.schema,
)


def _typer_app(commands: Sequence[Callable[..., None]]) -> typer.Typer:
    """The ``eks-inference`` app with ``commands``."""
    built = typer.Typer(
        name="eks-inference",
        cls=_OneLineErrors,
        help="Plan, upload and check LLM deployments on EKS (Inferentia2 and NVIDIA L40S).",
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    built.callback(invoke_without_command=True)(_root)
    for command in commands:
        built.command()(command)
    return built


app = _typer_app(_COMMANDS)


def main() -> None:
    """Console-script entry point (also ``python -m eks_inference``).

    A run naming a command builds the app with that command alone: typer reads the signature
    and options of every command it is given before it parses anything, and the others would
    not run. Without one (``--help``, a mistyped name), the app has every command.
    """
    # What start-up imported (modules, their classes, pydantic's validators) lives until exit:
    # frozen, it is left out of the collector's passes during the command and of the last
    # one at exit, which would only walk it (some 30 ms of every run).
    gc.freeze()
    by_name = {get_command_name(command.__name__): command for command in _COMMANDS}
    named = by_name.get(sys.argv[1]) if len(sys.argv) > 1 else None
    (app if named is None else _typer_app((named,)))(prog_name="eks-inference")
