"""One upload run, from the lease to the completion marker, following the rules of
:mod:`eks_inference.ops.upload`; and SIGTERM taken as Ctrl-C while it runs."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from eks_inference.ops.aws.errors import aws_errors, describe_error, error_code, is_not_found
from eks_inference.ops.errors import CommandFailed, Interrupted
from eks_inference.ops.progress import Advance
from eks_inference.ops.s3uri import S3Prefix
from eks_inference.ops.text import plural, quote_external
from eks_inference.ops.upload import MAX_LISTED
from eks_inference.ops.upload.delete import DeletionError, delete_objects
from eks_inference.ops.upload.files import LocalFile
from eks_inference.ops.upload.lease import Lease, LeaseOwner, acquire, refuse_overlapping
from eks_inference.ops.upload.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    build_manifest,
    manifest_key,
    manifest_matches,
    write_manifest,
)
from eks_inference.ops.upload.remote import abort_stale_uploads, check_bucket, compare, refusal
from eks_inference.ops.upload.settings import UploadSettings
from eks_inference.ops.upload.transfer import TransferOutcome, transfer
from eks_inference.ops.upload.verify import verify, verify_checksums
from eks_inference.specification.artifacts import COMPLETION_MARKER_NAME

# S3's error when the bytes it received do not match the checksum sent with them.
_CHECKSUM_MISMATCH = "BadDigest"


@dataclass
class UploadReport:
    """What a run did."""

    uploaded: list[LocalFile] = field(default_factory=list)
    skipped: list[LocalFile] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    manifest_written: bool = False
    aborted_uploads: list[str] = field(default_factory=list)
    """Keys of the multipart uploads earlier runs left open under the prefix, now aborted."""
    took_over_from: LeaseOwner | None = None
    """The owner of the expired (or dead) lease this run took over, if any."""

    @property
    def bytes_uploaded(self) -> int:
        """Bytes sent by this run."""
        return sum(f.size for f in self.uploaded)


@dataclass
class _Bookkeeping:
    """The manifest and marker found under the prefix, and whether this run removed them."""

    present: set[str]
    manifest_body: bytes | None
    """The manifest's bytes, to put back if the run changes nothing; None when absent."""
    removed: bool = False


def _read_bookkeeping(client: Any, target: S3Prefix, present: frozenset[str]) -> _Bookkeeping:
    """The bookkeeping objects under the prefix and the manifest's bytes, before any change.

    A manifest larger than any this tool writes is not kept (it is not one to put back).
    """
    if MANIFEST_NAME not in present:
        return _Bookkeeping(set(present), None)
    with aws_errors(f"read {target.uri(MANIFEST_NAME)}"):
        try:
            response = client.get_object(Bucket=target.bucket, Key=manifest_key(target.prefix))
        except Exception as error:
            if is_not_found(error):
                return _Bookkeeping(set(present) - {MANIFEST_NAME}, None)
            raise
        stream = response["Body"]
        try:
            body = stream.read(MAX_MANIFEST_BYTES + 1)
        finally:
            stream.close()
    return _Bookkeeping(set(present), body if len(body) <= MAX_MANIFEST_BYTES else None)


def _restore(client: Any, target: S3Prefix, bookkeeping: _Bookkeeping) -> None:
    """Put back the manifest (and marker) removed by a run that then changed nothing."""
    if not bookkeeping.removed or (
        MANIFEST_NAME in bookkeeping.present and bookkeeping.manifest_body is None
    ):
        return
    with aws_errors(f"restore {target.uri(MANIFEST_NAME)}"):
        if bookkeeping.manifest_body is not None:
            client.put_object(
                Bucket=target.bucket,
                Key=manifest_key(target.prefix),
                Body=bookkeeping.manifest_body,
                ContentType="application/json",
            )
        if COMPLETION_MARKER_NAME in bookkeeping.present:
            client.put_object(
                Bucket=target.bucket, Key=target.key(COMPLETION_MARKER_NAME), Body=b""
            )
    bookkeeping.removed = False


def _transfer_failure(outcome: TransferOutcome, to_send: list[LocalFile]) -> CommandFailed:
    where = f"{outcome.failed_file.relative}: " if outcome.failed_file else ""
    if outcome.problem is not None:
        reason = str(outcome.problem)
    elif outcome.error is not None and error_code(outcome.error) == _CHECKSUM_MISMATCH:
        reason = "it changed while it was uploaded, S3 refused bytes other than those hashed"
    elif outcome.error is not None:
        reason = describe_error(outcome.error, "S3")
    else:
        reason = "not completed"
    return CommandFailed(
        f"upload stopped ({where}{reason}); {len(outcome.done)} of {len(to_send)} files "
        "completed and are kept, the manifest was not written. Re-run the same command "
        "to upload only what is missing"
    )


def upload_directory(
    client: Any,
    local: list[LocalFile],
    target: S3Prefix,
    settings: UploadSettings,
    start_upload: Callable[[int], Advance] | None = None,
) -> UploadReport:
    """Upload hashed local files to ``target`` following the upload rules.

    The whole run holds the prefix's lease (:mod:`eks_inference.ops.upload.lease`), released
    at the end whatever happens. ``start_upload`` is called once the bytes to send are known
    and returns the callback the transfer reports progress to. Ctrl-C (or SIGTERM) at any
    point ends in one line saying what state the prefix was left in.
    """
    try:
        check_bucket(client, target)
        lease = acquire(client, target)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted; nothing under {target} was changed") from None
    report = UploadReport(took_over_from=lease.taken_over)
    try:
        refuse_overlapping(client, target)
        lease.start_renewing()
        return _upload_leased(client, local, target, settings, lease, report, start_upload)
    except KeyboardInterrupt:
        if report.manifest_written:
            # Only the completion marker of artifacts comes after the manifest.
            raise Interrupted(
                f"interrupted after the manifest was written, before the completion marker; "
                f"re-run the same command to finish {target}"
            ) from None
        raise Interrupted(
            f"interrupted; objects already complete under {target} are kept and the manifest "
            "was not written. Re-run the same command to upload only what is missing"
        ) from None
    finally:
        lease.release()


def _upload_leased(
    client: Any,
    local: list[LocalFile],
    target: S3Prefix,
    settings: UploadSettings,
    lease: Lease,
    report: UploadReport,
    start_upload: Callable[[int], Advance] | None,
) -> UploadReport:
    comparison = compare(client, target, local, settings.kind, settings.concurrency)
    refused = refusal(target, comparison, settings)
    if refused:
        raise CommandFailed(refused)
    to_send = list(comparison.missing) + [f for f, _ in comparison.differing]
    to_delete = list(comparison.extra)
    report.skipped = list(comparison.unchanged)
    report.aborted_uploads = abort_stale_uploads(client, target, lease.stale_before)
    bookkeeping = _read_bookkeeping(client, target, comparison.bookkeeping)
    if bookkeeping.present and (to_send or to_delete):
        # The prefix is about to change: until the new manifest (and marker) are written it
        # must not look complete to preflight, to serving or to a reader of the old manifest.
        # Should S3 refuse the first deletion of a run that only deletes, they are put back.
        lease.renew()
        delete_objects(client, target, sorted(bookkeeping.present))
        bookkeeping.removed = True
    advance = start_upload(sum(f.size for f in to_send)) if start_upload else None
    outcome = transfer(client, target, to_send, settings, advance)
    report.uploaded = [f for f in outcome.done if f not in outcome.changed]
    if outcome.changed:
        # Stored by an endpoint that did not check the checksum sent with them.
        changed = [f.relative for f in outcome.changed]
        delete_objects(client, target, changed)
        raise CommandFailed(
            f"{plural(len(changed), 'file')} changed while being uploaded "
            f"({', '.join(quote_external(k) for k in changed[:MAX_LISTED])}): the bytes "
            "sent differ from the bytes hashed, so those objects were deleted and the "
            "manifest was not written. Make sure nothing writes to the directory, then re-run"
        )
    if outcome.error is not None or outcome.not_done:
        raise _transfer_failure(outcome, to_send)
    verify_checksums(client, target, list(outcome.done), settings.concurrency)
    verify(client, target, local)
    if to_delete:
        lease.renew()
        try:
            report.deleted = delete_objects(client, target, to_delete)
        except DeletionError as error:
            if not to_send and not error.deleted and error.refused:
                # S3 refused the first deletion and nothing else was to change: the prefix
                # is as it was, so its manifest is true again.
                _restore(client, target, bookkeeping)
            raise
    lease.renew()
    present = bookkeeping.present if not bookkeeping.removed else set()
    if MANIFEST_NAME not in present or not manifest_matches(client, target, local):
        write_manifest(client, target, build_manifest(settings.kind, local))
        report.manifest_written = True
    if settings.kind == "artifacts" and COMPLETION_MARKER_NAME not in present:
        # Last of all, as a compile job does: the artifacts are complete from here on.
        with aws_errors(f"write {target.uri(COMPLETION_MARKER_NAME)}"):
            client.put_object(
                Bucket=target.bucket, Key=target.key(COMPLETION_MARKER_NAME), Body=b""
            )
    return report


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM stops the command as Ctrl-C does.

    Python's default for SIGTERM ends the process on the spot, leaving every multipart upload
    open; raised as ``KeyboardInterrupt`` it takes the same path as Ctrl-C, which aborts them
    and reports what was kept. Signal handlers can only be set from the main thread;
    elsewhere the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
