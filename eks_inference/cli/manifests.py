"""``manifests``: write the platform's Kubernetes manifests with the chart renderer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from eks_inference.cli import inputs
from eks_inference.cli.options import DEFAULT_PLATFORM, PlatformOption
from eks_inference.ops.errors import BadInput, CommandFailed, summarize_validation_error
from eks_inference.ops.text import printable
from eks_inference.specification.platform import PlatformSpec

# The option that consents to writing beside files the writer did not write.
ALLOW_OTHER_FILES_OPTION = "--allow-other-files"


def write(
    platform: PlatformSpec, platform_file: Path, out_dir: Path, *, allow_other_files: bool
) -> list[Path]:
    """Render every deployment into ``out_dir``, replacing the files written there before;
    the files written. Every failure is one line: bad input exits 2, a failed write 1.

    Every file is rendered (:mod:`eks_inference.charts.render`) before the writer
    (:mod:`eks_inference.output.writer`) touches the directory, so a spec that cannot be
    rendered leaves it as it was. The renderer is imported here, not at start-up: it builds
    every chart module, which the other commands do not need (it needs no JavaScript runtime).
    """
    from eks_inference.charts.context import MissingFileSystemError
    from eks_inference.charts.render import render_files
    from eks_inference.output.directory import ForeignFilesError, OutputDirError
    from eks_inference.output.writer import write_manifests

    # The messages quote names from the file system, where a newline is a legal character:
    # escaped, so that the error stays one line.
    try:
        files = render_files(platform)
        return write_manifests(files, out_dir, allow_other_files=allow_other_files)
    except ForeignFilesError as error:
        raise BadInput(
            printable(
                f"{error}, or pass {ALLOW_OTHER_FILES_OPTION} to write beside them (they are "
                "left untouched)"
            )
        ) from None
    except (OutputDirError, MissingFileSystemError) as error:
        raise BadInput(printable(str(error))) from None
    except ValidationError as error:
        # Rules checked while rendering: a pod that no node of its pool can run.
        raise BadInput(
            f"invalid platform file {platform_file}: {summarize_validation_error(error)}"
        ) from None
    except OSError as error:
        where = f" ({error.filename})" if error.filename else ""
        raise CommandFailed(
            printable(
                f"cannot write the manifests to {out_dir}: {error.strerror or error}{where}; the "
                "previous manifests there are unchanged"
            )
        ) from None


def manifests(
    out: Annotated[
        Path,
        typer.Option(
            help="Directory to write the Kubernetes manifests to: new, empty, or written by "
            "this command before (only its own files there are replaced)."
        ),
    ],
    platform: PlatformOption = DEFAULT_PLATFORM,
    allow_other_files: Annotated[
        bool,
        typer.Option(
            "--allow-other-files",
            help="Write even though --out holds files this command did not write; they are "
            "left untouched.",
        ),
    ] = False,
) -> None:
    """Write every deployment's Kubernetes manifests (no AWS access needed)."""
    from eks_inference.ops.text import plural

    spec = inputs.load_platform(platform)
    written = write(spec, platform, out, allow_other_files=allow_other_files)
    typer.echo(f"wrote {plural(len(written), 'manifest file')} to {out}")
