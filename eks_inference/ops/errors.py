"""The two ways an operation fails, each with the exit code its command ends with.

Bad input (an unknown model, a malformed S3 URI, an invalid platform file) exits with 2, as
click does for usage errors; a command that ran and found a problem (a refused upload, an AWS
error, a failed preflight) exits with 1. The message is the one line the command prints
(:mod:`eks_inference.cli.main` shows it as ``error: ...``, never with a traceback); these
classes carry no presentation, so the operations stay free of the CLI framework.
"""

from __future__ import annotations

from pydantic import ValidationError

from eks_inference.ops.text import quote_external
from eks_inference.specification.validation import one_line


class OperationError(Exception):
    """A failure to report as its message alone, and the exit code that goes with it."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def format_message(self) -> str:
        """The message as the command prints it."""
        return self.message


# The two kinds keep the names the commands and the CDK app have always caught them by.
class BadInput(OperationError):  # noqa: N818
    """The command was given something it cannot use; exit code 2, as for usage errors."""

    exit_code = 2


class CommandFailed(OperationError):  # noqa: N818
    """The command ran and failed; exit code 1. The message may span lines (a listing)."""

    exit_code = 1


def summarize_validation_error(error: ValidationError) -> str:
    """pydantic's errors on one line: ``loc: message; loc: message (+N more)``."""
    # Keys come from the file: one with a newline, an escape or 100,000 characters must not
    # break or swamp the line.
    return one_line(error, quote=quote_external)


class Interrupted(CommandFailed):
    """Stopped by Ctrl-C; exit code 130, as shells report SIGINT."""

    exit_code = 130
