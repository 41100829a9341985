"""The CDK app's entry point (``app.py``, run by ``cdk synth`` and ``python app.py``).

A platform file or context value that is wrong ends the app with the same one line that
``eks-inference plan`` prints for it, on stderr, and exit code 2: never a Python traceback,
which the CDK CLI would print whole under its own messages.

The platform file is ``deployments.yaml`` beside ``app.py`` unless the ``platform`` context
value names another (``cdk synth -c platform=path/to/platform.yaml``; relative to the current
directory, which for ``cdk`` is the folder holding ``cdk.json``; an empty value is refused, not
read as the default). ``python app.py`` reads context from the ``CDK_CONTEXT_JSON`` environment
variable, as every CDK app does.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from eks_inference.cli.inputs import load_platform
from eks_inference.ops.errors import BadInput, summarize_validation_error
from eks_inference.ops.text import printable
from eks_inference.specification import files as spec_file
from eks_inference.specification.platform import PlatformSpec

if TYPE_CHECKING:
    from aws_cdk import App

# The context key naming the platform file.
PLATFORM_CONTEXT = "platform"
# Where the CDK CLI hands an app its context: a JSON object in this variable, and what did
# not fit in the environment in the JSON file the second one names (aws-cdk-lib's App reads
# the same two, as the CLI's cx-api constants CONTEXT_ENV and CONTEXT_OVERFLOW_LOCATION_ENV).
CONTEXT_ENV = "CDK_CONTEXT_JSON"
CONTEXT_OVERFLOW_ENV = "CONTEXT_OVERFLOW_LOCATION_ENV"
# The context file the CLI writes holds cdk.json's context, the -c values and cached lookups:
# kilobytes. Far more is another file, read no further.
MAX_CONTEXT_BYTES = 16 * 2**20


def main(default_platform: Path) -> None:
    """Build the app from the platform file and synthesize it; exit 2 on bad input.

    The platform file is read and validated before aws-cdk-lib is imported: a bad file is
    refused in the time ``eks-inference plan`` takes, without starting jsii's Node.js.
    """
    try:
        given = _context().get(PLATFORM_CONTEXT)
        if given is not None and not str(given).strip():
            # `-c platform=$FILE` with FILE unset: building the reference platform instead
            # would deploy another platform than the one meant.
            raise BadInput(
                f"the {PLATFORM_CONTEXT} context value is empty; give the platform file's path, "
                f"or leave it out for {default_platform.name}"
            )
        path = default_platform if given is None else Path(str(given))
        platform = load_platform(path)
        from eks_inference.stacks.app import reference_app

        app = reference_app()
        build(app, path, platform)
    except BadInput as error:
        # As the CLI prints it: a key or file name from the file may hold terminal escapes.
        print(f"error: {printable(error.format_message())}", file=sys.stderr)
        sys.exit(error.exit_code)
    app.synth()


def _context() -> dict[str, Any]:
    """The app's context as the CDK CLI passed it, read without aws-cdk-lib."""
    context: dict[str, Any] = {}
    try:
        texts = []
        if os.environ.get(CONTEXT_ENV):
            texts.append(os.environ[CONTEXT_ENV])
        if os.environ.get(CONTEXT_OVERFLOW_ENV):
            texts.append(_context_file(Path(os.environ[CONTEXT_OVERFLOW_ENV])))
        for text in texts:
            loaded = json.loads(text)
            if not isinstance(loaded, dict):
                raise ValueError(f"a JSON object of context keys was expected, not {text[:40]!r}")
            context.update(loaded)
    except (OSError, ValueError) as error:
        raise BadInput(f"the CDK context could not be read: {error}") from None
    return context


def _context_file(path: Path) -> str:
    """The context file the CDK CLI names, read as a spec file is: a FIFO or a device is
    refused at once instead of blocking the app, and reading stops past
    :data:`MAX_CONTEXT_BYTES`."""
    data = spec_file.read_regular_file(path, MAX_CONTEXT_BYTES, "a JSON file")
    if len(data) > MAX_CONTEXT_BYTES:
        raise ValueError(
            f"{path} is larger than {MAX_CONTEXT_BYTES // 2**20} MiB; the CLI's context is a "
            "few KB of JSON"
        )
    return data.decode("utf-8")


def build(app: App, path: Path, platform: PlatformSpec | None = None) -> None:
    """Build ``app`` from the platform file at ``path`` (or ``platform``, already read from
    it); every spec or context error is a :class:`~eks_inference.ops.errors.BadInput` with
    the line ``eks-inference`` prints.

    The app's context can change the platform (``node_provisioning`` validates it again in
    that mode) or be wrong itself (a region other than the platform's); :func:`build_app`
    raises a ``ValidationError`` for either, and ``ValueError`` for a problem found while
    building (a kubectl layer package that is not installed).
    """
    from eks_inference.stacks.app import build_app

    platform = platform or load_platform(path)
    try:
        build_app(platform, app=app)
    except ValidationError as error:
        # The platform validated again in the mode the context asks for, or the context's own
        # values, located at their keys.
        source = f"platform file {path}" if error.title == PlatformSpec.__name__ else "context"
        raise BadInput(f"invalid {source}: {summarize_validation_error(error)}") from None
    except ValueError as error:
        raise BadInput(str(error)) from None
