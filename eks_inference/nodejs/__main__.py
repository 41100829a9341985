"""``python -m eks_inference.nodejs COMMAND [ARGS...]``: run COMMAND on the pinned Node.js 24.

The command replaces this process, so its exit code and signals are its own. ``node``, ``npm``
and ``npx`` are the pinned Node.js and its npm; any other command is looked up on ``PATH``
with the pinned Node.js first, and runs with it as jsii's Node.js (see
:mod:`eks_inference.nodejs`). For example ``python -m eks_inference.nodejs npx cdk synth``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from eks_inference.nodejs import NODE, NPM_SCRIPTS, pinned_environment


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``argv`` (default: this process's arguments) on the pinned Node.js."""
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        print("usage: python -m eks_inference.nodejs COMMAND [ARGS...]", file=sys.stderr)
        raise SystemExit(2)
    if command[0] == "node":
        command[0] = str(NODE)
    elif command[0] in NPM_SCRIPTS:
        command[:1] = [str(NODE), str(NPM_SCRIPTS[command[0]])]
    try:
        os.execvpe(command[0], command, pinned_environment())
    except OSError as error:
        print(f"error: cannot run {command[0]!r}: {error.strerror}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
