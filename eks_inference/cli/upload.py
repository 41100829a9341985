"""``upload``: put model weights or compiled artifacts under an S3 prefix, resumably.

The rules, in the order they apply:

* Every file's SHA-256 is computed locally (streaming) and stored as object metadata, so a
  later run can tell an identical object from a different one of the same size.
* A file whose object already exists with the same size and SHA-256 is skipped, so re-running
  after an interruption sends only what is missing.
* An object that differs, or an object under the prefix with no local file, is never replaced
  or deleted without ``overwrite`` / ``delete``; without them nothing is uploaded at all.
* Only a completed object counts: S3 does not list a multipart upload until it completes, and
  the transfer manager aborts the multipart uploads of a failed or cancelled transfer.
* The manifest (``_manifest.json``) is written last, after every file is verified in the
  bucket; for compiled artifacts the completion marker follows it. Both are deleted before
  anything under the prefix changes, so a prefix with a manifest is always complete.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eks_inference.artifacts import COMPLETION_MARKER_NAME
from eks_inference.cli.aws import aws_errors, describe_error, error_code, is_not_found
from eks_inference.cli.errors import BadInput, CommandFailed, Interrupted
from eks_inference.cli.progress import Advance
from eks_inference.cli.s3uri import S3Prefix
from eks_inference.cli.upload_manifest import (
    MANIFEST_NAME,
    SHA256_METADATA_KEY,
    Kind,
    ManifestFile,
    UploadManifest,
    manifest_key,
)

MIB = 1024**2
# S3's smallest multipart part (except the last).
MIN_PART_SIZE_MIB = 5
_HASH_CHUNK = 8 * MIB
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
# Lines of a refusal listing shown before "(+N more)".
_MAX_LISTED = 20


@dataclass(frozen=True)
class LocalFile:
    """A file to upload: its key relative to the prefix, path, size and SHA-256."""

    relative: str
    path: Path
    size: int
    sha256: str


@dataclass(frozen=True)
class UploadSettings:
    """How to upload; ``overwrite`` and ``delete`` allow replacing and removing objects."""

    part_size_mib: int
    concurrency: int
    kind: Kind = "weights"
    overwrite: bool = False
    delete: bool = False


@dataclass(frozen=True)
class Comparison:
    """Local files against the objects under the prefix."""

    missing: tuple[LocalFile, ...]
    unchanged: tuple[LocalFile, ...]
    differing: tuple[tuple[LocalFile, str], ...]
    extra: tuple[str, ...]
    bookkeeping: frozenset[str]
    """Bookkeeping objects (manifest, completion marker) present under the prefix."""


@dataclass
class UploadReport:
    """What a run did."""

    uploaded: list[LocalFile] = field(default_factory=list)
    skipped: list[LocalFile] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    manifest_written: bool = False

    @property
    def bytes_uploaded(self) -> int:
        """Bytes sent by this run."""
        return sum(f.size for f in self.uploaded)


def bookkeeping_names(kind: Kind) -> tuple[str, ...]:
    """Objects under the prefix that record an upload rather than being part of it.

    Compiled artifacts also get the completion marker that serving and preflight look for.
    """
    return (MANIFEST_NAME, COMPLETION_MARKER_NAME) if kind == "artifacts" else (MANIFEST_NAME,)


def scan_directory(local_dir: Path, kind: Kind) -> list[tuple[str, Path]]:
    """The files to upload as ``(relative key, path)``, sorted, after checking the directory.

    Hidden files and directories (``.cache/`` left by Hugging Face downloads, ``.DS_Store``)
    are not part of a model and are skipped. Weights must look like a Hugging Face model
    directory, so that a wrong path fails here instead of in a pod minutes after start.
    """
    if not local_dir.is_dir():
        raise BadInput(f"{local_dir} is not a directory")
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(local_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(root, name)
            if path.is_file():
                found.append((path.relative_to(local_dir).as_posix(), path))
    found.sort()
    top_level = {rel for rel, _ in found if "/" not in rel}
    for name in bookkeeping_names(kind):
        if name in top_level:
            raise BadInput(f"{local_dir / name} would collide with the upload's own {name}")
    if kind == "weights":
        if "config.json" not in top_level:
            raise BadInput(f"{local_dir} does not look like a model: no config.json in it")
        if not any(rel.endswith(_WEIGHT_SUFFIXES) for rel in top_level):
            raise BadInput(
                f"{local_dir} does not look like a model: no *.safetensors or *.bin weights in it"
            )
    elif not found:
        raise BadInput(f"{local_dir} is empty; nothing to upload as artifacts")
    return found


def sha256_file(path: Path, advance: Advance | None = None) -> str:
    """SHA-256 of a file, read in chunks so that a 10 GB shard needs little memory."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_HASH_CHUNK):
            digest.update(chunk)
            if advance is not None:
                advance(len(chunk))
    return digest.hexdigest()


def hash_files(
    files: Iterable[tuple[str, Path]], concurrency: int, advance: Advance | None = None
) -> list[LocalFile]:
    """Size and hash every file, several at once (hashlib releases the GIL on large reads)."""

    def one(item: tuple[str, Path]) -> LocalFile:
        relative, path = item
        try:
            return LocalFile(relative, path, path.stat().st_size, sha256_file(path, advance))
        except OSError as error:
            raise CommandFailed(f"cannot read {path}: {error.strerror or error}") from None

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(one, files))


def check_bucket(client: Any, target: S3Prefix) -> None:
    """Fail with one clear line when the bucket is missing or not accessible."""
    try:
        client.head_bucket(Bucket=target.bucket)
    except Exception as error:
        if is_not_found(error):
            raise CommandFailed(f"bucket {target.bucket} does not exist") from None
        if error_code(error) in {"403", "AccessDenied"}:
            raise CommandFailed(
                f"access denied to bucket {target.bucket}; the credentials need "
                "s3:ListBucket on it and s3:GetObject/s3:PutObject on the prefix"
            ) from None
        raise CommandFailed(
            f"cannot read bucket {target.bucket}: {describe_error(error)}"
        ) from None


def list_objects(client: Any, target: S3Prefix) -> dict[str, int]:
    """Completed objects under the prefix: relative key to size (folder markers left out)."""
    objects: dict[str, int] = {}
    with aws_errors(f"list {target}"):
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=target.bucket, Prefix=target.prefix
        ):
            for item in page.get("Contents", []):
                if not item["Key"].endswith("/"):
                    objects[target.relative(item["Key"])] = int(item["Size"])
    return objects


def remote_sha256(client: Any, target: S3Prefix, relative: str) -> str | None:
    """The SHA-256 an object was uploaded with, or None when it carries none."""
    with aws_errors(f"read {target.uri(relative)}"):
        head = client.head_object(Bucket=target.bucket, Key=target.key(relative))
    value = head.get("Metadata", {}).get(SHA256_METADATA_KEY)
    return str(value) if value else None


def compare(
    client: Any, target: S3Prefix, local: list[LocalFile], kind: Kind, concurrency: int
) -> Comparison:
    """Classify each local file as missing, unchanged or differing, and find extra objects."""
    remote = list_objects(client, target)
    bookkeeping = frozenset(
        name for name in bookkeeping_names(kind) if remote.pop(name, None) is not None
    )
    same_size = [f for f in local if remote.get(f.relative) == f.size]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        hashes = dict(
            zip(
                (f.relative for f in same_size),
                pool.map(lambda f: remote_sha256(client, target, f.relative), same_size),
                strict=True,
            )
        )
    missing, unchanged, differing = [], [], []
    for f in local:
        if f.relative not in remote:
            missing.append(f)
        elif remote[f.relative] != f.size:
            differing.append((f, f"size {remote[f.relative]} in S3, {f.size} locally"))
        elif hashes[f.relative] is None:
            differing.append((f, "same size, but the object has no sha256 metadata to compare"))
        elif hashes[f.relative] != f.sha256:
            differing.append((f, "same size, different sha256"))
        else:
            unchanged.append(f)
    local_keys = {f.relative for f in local}
    extra = tuple(sorted(k for k in remote if k not in local_keys))
    return Comparison(tuple(missing), tuple(unchanged), tuple(differing), extra, bookkeeping)


def refusal(target: S3Prefix, comparison: Comparison, settings: UploadSettings) -> str | None:
    """The error listing what would be overwritten or deleted without permission, or None."""
    blocked_diff = [] if settings.overwrite else list(comparison.differing)
    blocked_extra = [] if settings.delete else list(comparison.extra)
    if not blocked_diff and not blocked_extra:
        return None
    lines = [f"{target} already holds objects that this upload would change; nothing was uploaded"]
    items = [f"  differs: {f.relative} ({reason})" for f, reason in blocked_diff]
    items += [f"  extra in S3: {key}" for key in blocked_extra]
    lines += items[:_MAX_LISTED]
    if len(items) > _MAX_LISTED:
        lines.append(f"  (+{len(items) - _MAX_LISTED} more)")
    hints = []
    if blocked_diff:
        hints.append("--overwrite to replace differing objects")
    if blocked_extra:
        hints.append("--delete to remove extra objects")
    lines.append("pass " + " and ".join(hints))
    return "\n".join(lines)


class _ProgressSubscriber:
    """Feeds the transfer manager's byte counts to a progress callback.

    The transfer manager only looks for ``on_queued``/``on_progress``/``on_done``, so no
    base class is needed.
    """

    def __init__(self, advance: Advance) -> None:
        self._advance = advance

    def on_queued(self, future: Any, **kwargs: Any) -> None:
        """Nothing to do until bytes move."""

    def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
        self._advance(bytes_transferred)

    def on_done(self, future: Any, **kwargs: Any) -> None:
        """Completion is read from the future itself."""


@dataclass(frozen=True)
class TransferOutcome:
    """Files that completed, files that did not, and the error that stopped the transfer."""

    done: tuple[LocalFile, ...]
    not_done: tuple[LocalFile, ...]
    error: BaseException | None = None
    failed_file: LocalFile | None = None


def transfer(
    client: Any,
    target: S3Prefix,
    files: list[LocalFile],
    settings: UploadSettings,
    advance: Advance | None = None,
) -> TransferOutcome:
    """Upload ``files`` in parallel, multipart above the part size; stop at the first failure.

    On a failure (or Ctrl-C, which propagates) leaving the transfer manager's block cancels
    the remaining transfers and aborts their multipart uploads, so no partial object is ever
    left looking complete; files that completed before stay and count on the next run.
    """
    from boto3.s3.transfer import (  # type: ignore[import-untyped]
        TransferConfig,
        create_transfer_manager,
    )

    part = settings.part_size_mib * MIB
    config = TransferConfig(
        multipart_threshold=part,
        multipart_chunksize=part,
        max_concurrency=settings.concurrency,
        use_threads=True,
    )
    subscribers = [_ProgressSubscriber(advance)] if advance is not None else []
    futures: list[tuple[LocalFile, Any]] = []
    error: BaseException | None = None
    failed_file: LocalFile | None = None
    try:
        with create_transfer_manager(client, config) as manager:
            for f in files:
                future = manager.upload(
                    str(f.path),
                    target.bucket,
                    target.key(f.relative),
                    extra_args={"Metadata": {SHA256_METADATA_KEY: f.sha256}},
                    subscribers=subscribers,
                )
                futures.append((f, future))
            for f, future in futures:
                failed_file = f
                future.result()
            failed_file = None
    except Exception as caught:
        error = caught
    done, not_done = [], []
    for f, future in futures:
        try:
            future.result()
        except Exception:
            not_done.append(f)
        else:
            done.append(f)
    submitted = {f.relative for f, _ in futures}
    not_done += [f for f in files if f.relative not in submitted]
    return TransferOutcome(tuple(done), tuple(not_done), error, failed_file)


def verify(client: Any, target: S3Prefix, files: list[LocalFile]) -> None:
    """Check that every file is now a complete object of the right size."""
    remote = list_objects(client, target)
    wrong = [f.relative for f in files if remote.get(f.relative) != f.size]
    if wrong:
        raise CommandFailed(
            f"after upload, {len(wrong)} objects under {target} are missing or have the wrong "
            f"size ({', '.join(wrong[:_MAX_LISTED])}); the manifest was not written, re-run"
        )


def delete_objects(client: Any, target: S3Prefix, relatives: list[str]) -> None:
    """Delete objects by relative key, 1000 per request (the API's limit)."""
    for start in range(0, len(relatives), 1000):
        batch = relatives[start : start + 1000]
        with aws_errors(f"delete objects under {target}"):
            response = client.delete_objects(
                Bucket=target.bucket,
                Delete={"Objects": [{"Key": target.key(k)} for k in batch], "Quiet": True},
            )
        if response.get("Errors"):
            first = response["Errors"][0]
            raise CommandFailed(
                f"cannot delete {first.get('Key')}: {first.get('Code')} {first.get('Message', '')}"
            )


def build_manifest(kind: Kind, files: list[LocalFile]) -> UploadManifest:
    """The manifest of a completed upload, files sorted by key, stamped now (UTC)."""
    return UploadManifest(
        kind=kind,
        created=datetime.now(UTC),
        files=tuple(
            ManifestFile(key=f.relative, size=f.size, sha256=f.sha256)
            for f in sorted(files, key=lambda f: f.relative)
        ),
    )


def read_manifest(client: Any, bucket: str, key: str) -> UploadManifest | None:
    """The manifest at ``key``, or None when there is none; unreadable ones raise."""
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as error:
        if is_not_found(error):
            return None
        raise
    return UploadManifest.model_validate_json(body)


def _manifest_matches(client: Any, target: S3Prefix, files: list[LocalFile]) -> bool:
    """True when the manifest in S3 already lists exactly these files."""
    try:
        with aws_errors(f"read {target.uri(MANIFEST_NAME)}"):
            existing = read_manifest(client, target.bucket, manifest_key(target.prefix))
    except ValueError:
        # Not a manifest this version can read: it is rewritten.
        return False
    if existing is None:
        return False
    wanted = {(f.relative, f.size, f.sha256) for f in files}
    return {(f.key, f.size, f.sha256) for f in existing.files} == wanted


def write_manifest(client: Any, target: S3Prefix, manifest: UploadManifest) -> None:
    """Write the manifest object; called only once every file is verified."""
    body = json.dumps(manifest.model_dump(mode="json"), indent=2).encode()
    with aws_errors(f"write {target.uri(MANIFEST_NAME)}"):
        client.put_object(
            Bucket=target.bucket,
            Key=manifest_key(target.prefix),
            Body=body,
            ContentType="application/json",
        )


def upload_directory(
    client: Any,
    local: list[LocalFile],
    target: S3Prefix,
    settings: UploadSettings,
    start_upload: Callable[[int], Advance] | None = None,
) -> UploadReport:
    """Upload hashed local files to ``target`` following the rules of this module.

    ``start_upload`` is called once the bytes to send are known and returns the callback
    the transfer reports progress to.
    """
    check_bucket(client, target)
    comparison = compare(client, target, local, settings.kind, settings.concurrency)
    refused = refusal(target, comparison, settings)
    if refused:
        raise CommandFailed(refused)
    to_send = list(comparison.missing) + [f for f, _ in comparison.differing]
    to_delete = list(comparison.extra)
    report = UploadReport(skipped=list(comparison.unchanged))
    present = set(comparison.bookkeeping)
    if (to_send or to_delete) and present:
        # The prefix is about to change: until the new manifest (and marker) are written it
        # must not look complete to preflight, to serving or to a reader of the old manifest.
        delete_objects(client, target, sorted(present))
        present.clear()
    try:
        advance = start_upload(sum(f.size for f in to_send)) if start_upload else None
        outcome = transfer(client, target, to_send, settings, advance)
    except KeyboardInterrupt:
        raise Interrupted(
            f"interrupted; objects already complete under {target} are kept and the manifest "
            "was not written. Re-run the same command to upload only what is missing"
        ) from None
    report.uploaded = list(outcome.done)
    if outcome.error is not None or outcome.not_done:
        where = f"{outcome.failed_file.relative}: " if outcome.failed_file else ""
        reason = describe_error(outcome.error) if outcome.error else "not completed"
        raise CommandFailed(
            f"upload stopped ({where}{reason}); {len(outcome.done)} of {len(to_send)} files "
            "completed and are kept, the manifest was not written. Re-run the same command "
            "to upload only what is missing"
        )
    verify(client, target, local)
    if to_delete:
        delete_objects(client, target, to_delete)
        report.deleted = to_delete
    if MANIFEST_NAME not in present or not _manifest_matches(client, target, local):
        write_manifest(client, target, build_manifest(settings.kind, local))
        report.manifest_written = True
    if settings.kind == "artifacts" and COMPLETION_MARKER_NAME not in present:
        # Last of all, as a compile job does: the artifacts are complete from here on.
        with aws_errors(f"write {target.uri(COMPLETION_MARKER_NAME)}"):
            client.put_object(
                Bucket=target.bucket, Key=target.key(COMPLETION_MARKER_NAME), Body=b""
            )
    return report
