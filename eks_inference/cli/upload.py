"""``upload``: put a directory of weights or compiled artifacts under an S3 prefix.

The upload itself (scan, hashing, lease, transfer, verification, manifest) is
:mod:`eks_inference.ops.upload`; this module checks the options, shows the progress bars and
prints what the run did. boto3 is imported only when the command runs.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from eks_inference.cli import console, inputs
from eks_inference.ops.errors import BadInput, CommandFailed

# The upload defaults, here rather than in ops.upload so that --help does not import boto3:
# 64 MiB parts keep a 10 GB shard at ~160 parts (S3 allows 10,000), and 16 parallel
# transfers saturate a node's network without throttling from S3.
DEFAULT_PART_SIZE_MIB = 64
DEFAULT_CONCURRENCY = 16
# Each transfer holds a connection, a thread and (multipart) a part in memory. S3 serves about
# 100 MB/s per connection, so 64 at once already exceed a 25 Gb/s node's network several
# times over: more only adds sockets, threads and memory, and a typo such as 100000 would
# open thousands of connections.
MAX_CONCURRENCY = 64


class UploadKind(StrEnum):
    """What an upload directory holds."""

    weights = "weights"
    artifacts = "artifacts"
    adapter = "adapter"


def upload(
    local_dir: Annotated[
        Path, typer.Argument(help="Directory of weights, compiled artifacts or a LoRA adapter.")
    ],
    uri: Annotated[
        str,
        typer.Argument(
            help="Destination s3://BUCKET/PREFIX/ (trailing '/'); an adapter goes to "
            "<adapters.prefix><name>/, its folder under the deployment's adapters prefix."
        ),
    ],
    kind: Annotated[
        UploadKind,
        typer.Option(
            help="weights (a Hugging Face model dir), artifacts, or adapter (a PEFT adapter "
            "dir with adapter_config.json)."
        ),
    ] = UploadKind.weights,
    overwrite: Annotated[
        bool, typer.Option(help="Replace objects that differ from the local files.")
    ] = False,
    delete: Annotated[
        bool, typer.Option(help="Delete objects under the prefix that have no local file.")
    ] = False,
    part_size: Annotated[
        int, typer.Option(help="Multipart part size in MiB; larger files go multipart.")
    ] = DEFAULT_PART_SIZE_MIB,
    concurrency: Annotated[
        int, typer.Option(help=f"Parallel transfers and hashes, at most {MAX_CONCURRENCY}.")
    ] = DEFAULT_CONCURRENCY,
    profile: Annotated[str | None, typer.Option(help="AWS profile to use.")] = None,
) -> None:
    """Upload a directory to S3: resumable, checksummed, never overwriting unless asked."""
    from eks_inference.cli.progress import byte_progress
    from eks_inference.ops.aws import clients as aws_clients
    from eks_inference.ops.progress import Advance
    from eks_inference.ops.s3uri import parse_prefix_uri
    from eks_inference.ops.text import format_bytes, plural
    from eks_inference.ops.upload.hashing import hash_files
    from eks_inference.ops.upload.manifest import MANIFEST_NAME
    from eks_inference.ops.upload.run import sigterm_as_interrupt, upload_directory
    from eks_inference.ops.upload.scan import check_keys, scan_directory
    from eks_inference.ops.upload.settings import (
        MAX_PART_SIZE_MIB,
        MIN_PART_SIZE_MIB,
        UploadSettings,
    )

    target = parse_prefix_uri(uri)
    inputs.require_positive("--concurrency", concurrency)
    if concurrency > MAX_CONCURRENCY:
        raise BadInput(
            f"--concurrency must be at most {MAX_CONCURRENCY}, got {concurrency}: that many "
            "parallel transfers already exceed a node's network bandwidth to S3"
        )
    if not MIN_PART_SIZE_MIB <= part_size <= MAX_PART_SIZE_MIB:
        raise BadInput(
            f"--part-size must be at least {MIN_PART_SIZE_MIB} MiB and at most "
            f"{MAX_PART_SIZE_MIB} MiB (S3's part size limits)"
        )
    scanned = scan_directory(local_dir, kind.value)
    check_keys(target, (f.relative for f in scanned.files))
    for link in scanned.links:
        console.echo(f"note: {link}", err=True)
    settings = UploadSettings(
        kind=kind.value,
        overwrite=overwrite,
        delete=delete,
        part_size_mib=part_size,
        concurrency=concurrency,
    )
    session = aws_clients.connect(profile)
    # One connection per parallel transfer: botocore's default pool of 10 would make the
    # rest wait for a connection, or open and discard one per request.
    client = session.client("s3", max_connections=concurrency)
    deadlines = session.deadlines

    def start_upload(size: int) -> Advance:
        deadlines.allow_bytes(size)
        return progress.task("uploading", size)

    try:
        with sigterm_as_interrupt(), byte_progress(console.stderr()) as progress:
            hashing = progress.task("hashing", scanned.total_bytes)
            local = hash_files(scanned.files, concurrency, hashing)
            report = upload_directory(client, local, target, settings, start_upload)
    except CommandFailed as error:
        raise deadlines.failure(error) from None
    if report.took_over_from is not None:
        owner = report.took_over_from
        console.echo(
            f"note: took over the upload lease of host {owner.host}, pid {owner.pid}, which had "
            "expired or whose process is gone",
            err=True,
        )
    for key in report.deleted:
        console.echo(f"deleted {target.uri(key)}", err=True)
    if report.aborted_uploads:
        typer.echo(
            f"aborted {plural(len(report.aborted_uploads), 'multipart upload')} that an earlier "
            f"run left open under {target}",
            err=True,
        )
    manifest = "written" if report.manifest_written else "unchanged"
    typer.echo(
        f"uploaded {plural(len(report.uploaded), 'file')} ({format_bytes(report.bytes_uploaded)}), "
        f"skipped {len(report.skipped)} unchanged, "
        f"deleted {len(report.deleted)}{' (listed above)' if report.deleted else ''}; "
        f"manifest {manifest}: {target.uri(MANIFEST_NAME)}"
    )
