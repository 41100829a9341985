"""``upload``: put model weights or compiled artifacts under an S3 prefix, resumably.

The rules, in the order they apply:

* The directory is read completely before anything else happens: an entry that cannot be read
  (a directory without permission, a dangling link, a FIFO or device), a symbolic link that
  leads out of the directory or back into one of its own parents, or a name that cannot be an
  S3 key (not UTF-8; a control character, ``?``, ``#`` or ``\\``) stops the run with nothing
  sent, deleted or written. Links that stay inside the directory are followed, for files and
  directories alike: S3 has no links, so the target's content is uploaded under the link's
  name, and each such link is reported.
* Every file's SHA-256 and CRC-32 are computed locally (streaming). The SHA-256 is stored as
  object metadata, so a later run can tell an identical object from a different one of the
  same size; the CRC-32 is sent as the object's full-object checksum, so S3 refuses an object
  whose bytes differ from the ones hashed (a file that changed while it was uploaded), and the
  object's stored checksum is compared again after the transfer.
* A file whose object already exists with the same size and SHA-256 is skipped, so re-running
  after an interruption sends only what is missing.
* An object that differs, or an object under the prefix with no local file, is never replaced
  or deleted without ``overwrite`` / ``delete``; without them nothing is uploaded at all.
* Only a completed object counts: S3 does not list a multipart upload until it completes. The
  transfer manager aborts the multipart uploads of a failed or cancelled transfer (Ctrl-C, and
  SIGTERM, which stops an upload the same way); the ones a killed process or a lost
  connection leaves open under the prefix are aborted by the next run before it sends anything
  (and by the model bucket's lifecycle rule after a few days).
* The manifest (``_manifest.json``) is written last, after every file is verified in the
  bucket; for compiled artifacts the completion marker follows it. Both are deleted before
  anything under the prefix changes, so a prefix with a manifest is always complete.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import stat
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from eks_inference.artifacts import COMPLETION_MARKER_NAME
from eks_inference.aws_types import key_prefix_problem
from eks_inference.cli.aws import (
    aws_errors,
    describe_error,
    error_code,
    from_web_page,
    is_not_found,
)
from eks_inference.cli.errors import BadInput, CommandFailed, Interrupted
from eks_inference.cli.progress import Advance
from eks_inference.cli.s3uri import S3Prefix
from eks_inference.cli.text import plural
from eks_inference.cli.upload_manifest import (
    MANIFEST_NAME,
    SHA256_METADATA_KEY,
    Kind,
    ManifestFile,
    UploadManifest,
    manifest_key,
)

MIB = 1024**2
# S3's smallest multipart part (except the last) and its largest part.
MIN_PART_SIZE_MIB = 5
MAX_PART_SIZE_MIB = 5 * 1024
# S3's longest key, in UTF-8 bytes.
MAX_KEY_BYTES = 1024
_HASH_CHUNK = 8 * MIB
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
# Lines of a refusal listing shown before "(+N more)".
_MAX_LISTED = 20
# S3's error when the bytes it received do not match the checksum sent with them.
_CHECKSUM_MISMATCH = "BadDigest"


@dataclass(frozen=True)
class LocalFile:
    """A file to upload: its key relative to the prefix, path, size, SHA-256 and CRC-32.

    ``crc32`` is base64 of the big-endian CRC-32, the form S3 takes as ``ChecksumCRC32``.
    """

    relative: str
    path: Path
    size: int
    sha256: str
    crc32: str


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
    aborted_uploads: list[str] = field(default_factory=list)
    """Keys of the multipart uploads earlier runs left open under the prefix, now aborted."""

    @property
    def bytes_uploaded(self) -> int:
        """Bytes sent by this run."""
        return sum(f.size for f in self.uploaded)


def bookkeeping_names(kind: Kind) -> tuple[str, ...]:
    """Objects under the prefix that record an upload rather than being part of it.

    Compiled artifacts also get the completion marker that serving and preflight look for.
    """
    return (MANIFEST_NAME, COMPLETION_MARKER_NAME) if kind == "artifacts" else (MANIFEST_NAME,)


@dataclass(frozen=True)
class ScannedDirectory:
    """The files to upload as ``(relative key, path)`` sorted by key, and the links followed."""

    files: list[tuple[str, Path]]
    total_bytes: int
    links: list[str]
    """One note per symbolic link followed: its key, what it points to and what is uploaded."""


@dataclass
class _Walk:
    root: Path
    files: list[tuple[str, Path]] = field(default_factory=list)
    total_bytes: int = 0
    links: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    outside_links: bool = False


def _reason(error: BaseException) -> str:
    return str(getattr(error, "strerror", None) or error)


def _name_problem(name: str) -> str | None:
    """Why a file or directory name cannot be part of an S3 key, or None.

    A single name has no ``/``, ``.`` or ``..`` segment, so the key prefix rule finds exactly
    its characters.
    """
    try:
        name.encode()
    except UnicodeEncodeError:
        return "has a name that is not valid UTF-8, which S3 keys must be; rename it"
    if key_prefix_problem(name + "/") is not None:
        return "has a control character, '?', '#' or '\\' in its name, refused in keys; rename it"
    return None


def _walk_entry(walk: _Walk, entry: os.DirEntry[str], relative: str) -> os.stat_result | None:
    """The entry's status, following a link that stays inside the directory; None if refused."""
    path = Path(entry.path)
    try:
        if entry.is_symlink():
            target = os.readlink(path)
            try:
                real = path.resolve(strict=True)
            except FileNotFoundError:
                walk.problems.append(f"{relative!r} is a link to {target!r}, which does not exist")
                return None
            if not real.is_relative_to(walk.root):
                walk.problems.append(f"{relative!r} is a link to {target!r}, outside the directory")
                walk.outside_links = True
                return None
            walk.links.append(
                f"{relative!r} is a link to {target!r} inside the directory: what it points "
                "to is uploaded under the link's name"
            )
        return path.stat()
    except (OSError, RuntimeError) as error:
        # RuntimeError: a link loop, as Path.resolve reports it before Python 3.13.
        walk.problems.append(f"{relative!r} cannot be read ({_reason(error)})")
        return None


def _walk(local_dir: Path) -> _Walk:
    """Every entry below ``local_dir`` except hidden ones, each a file, a link or a problem.

    ``os.walk`` would skip a directory it cannot list and a linked directory without a word;
    here each one is accounted for.
    """
    walk = _Walk(root=local_dir.resolve())
    # (directory, its key prefix, the real paths of it and its parents: a link to one of them
    # would never end)
    pending: list[tuple[Path, str, frozenset[Path]]] = [(local_dir, "", frozenset({walk.root}))]
    while pending:
        directory, base, parents = pending.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as error:
            walk.problems.append(f"{base or './'!r} cannot be read ({_reason(error)})")
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            relative = base + entry.name
            problem = _name_problem(entry.name)
            if problem is not None:
                walk.problems.append(f"{relative!r} {problem}")
                continue
            status = _walk_entry(walk, entry, relative)
            if status is None:
                continue
            if stat.S_ISDIR(status.st_mode):
                real = Path(entry.path).resolve()
                if real in parents:
                    walk.problems.append(f"{relative!r} is a link to one of its own parents")
                    continue
                pending.append((Path(entry.path), relative + "/", parents | {real}))
            elif stat.S_ISREG(status.st_mode):
                walk.files.append((relative, Path(entry.path)))
                walk.total_bytes += status.st_size
            else:
                walk.problems.append(
                    f"{relative!r} is not a file or directory (a FIFO, socket or device)"
                )
    walk.files.sort()
    return walk


def scan_directory(local_dir: Path, kind: Kind) -> ScannedDirectory:
    """The files to upload, after checking that the directory can be uploaded as a whole.

    Hidden files and directories (``.cache/`` left by Hugging Face downloads, ``.DS_Store``)
    are not part of a model and are skipped. Anything else that cannot be read or uploaded
    fails here, naming every such entry, so that no upload, deletion or manifest ever rests on
    a partial listing. Weights must look like a Hugging Face model directory, so that a wrong
    path fails here instead of in a pod minutes after start.
    """
    if not local_dir.is_dir():
        raise BadInput(f"{local_dir} is not a directory")
    walk = _walk(local_dir)
    if walk.problems:
        listed = "; ".join(walk.problems[:_MAX_LISTED])
        more = len(walk.problems) - _MAX_LISTED
        hint = (
            " (copy link targets into the directory, e.g. with cp -rL)"
            if walk.outside_links
            else ""
        )
        raise BadInput(
            f"cannot upload {local_dir} as it is, nothing was sent; "
            f"{plural(len(walk.problems), 'problem')}: {listed}"
            f"{f' (+{more} more)' if more > 0 else ''}{hint}"
        )
    found = walk.files
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
    return ScannedDirectory(files=found, total_bytes=walk.total_bytes, links=walk.links)


def check_keys(target: S3Prefix, relatives: Iterable[str]) -> None:
    """Every file's key under ``target`` must fit S3's key length, or nothing is uploaded."""
    too_long = [r for r in relatives if len(target.key(r).encode()) > MAX_KEY_BYTES]
    if too_long:
        raise BadInput(
            f"{plural(len(too_long), 'key')} under {target} would be longer than S3's "
            f"{MAX_KEY_BYTES} bytes, e.g. {too_long[0]!r}; use a shorter prefix or shorter names"
        )


class _HashingStoppedError(Exception):
    """Another file failed or the run was interrupted: the remaining hashes are not needed."""


def file_digests(
    path: Path, advance: Advance | None = None, stop: threading.Event | None = None
) -> tuple[int, str, str]:
    """Size, SHA-256 (hex) and CRC-32 (base64, as S3 takes it) of a file, in one streaming read.

    The size is that of the bytes hashed, so the three always agree. Chunked, so that a 10 GB
    shard needs little memory; ``stop`` ends the read early.
    """
    digest = hashlib.sha256()
    crc = 0
    size = 0
    with path.open("rb") as stream:
        while chunk := stream.read(_HASH_CHUNK):
            if stop is not None and stop.is_set():
                raise _HashingStoppedError
            digest.update(chunk)
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
            if advance is not None:
                advance(len(chunk))
    return size, digest.hexdigest(), base64.b64encode(crc.to_bytes(4, "big")).decode()


def hash_files(
    files: Iterable[tuple[str, Path]], concurrency: int, advance: Advance | None = None
) -> list[LocalFile]:
    """Size and hash every file, several at once (hashlib releases the GIL on large reads).

    The first unreadable file, Ctrl-C or SIGTERM stops every other hash within one chunk.
    """
    stop = threading.Event()

    def one(item: tuple[str, Path]) -> LocalFile:
        relative, path = item
        try:
            size, sha256, crc32 = file_digests(path, advance, stop)
        except OSError as error:
            raise CommandFailed(f"cannot read {path}: {error.strerror or error}") from None
        return LocalFile(relative, path, size, sha256, crc32)

    pool = ThreadPoolExecutor(max_workers=concurrency)
    try:
        return list(pool.map(one, files))
    except KeyboardInterrupt:
        stop.set()
        raise Interrupted("interrupted while hashing; nothing was uploaded") from None
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def check_bucket(client: Any, target: S3Prefix) -> None:
    """Fail with one clear line when the bucket is missing or not accessible."""
    try:
        client.head_bucket(Bucket=target.bucket)
    except Exception as error:
        if not from_web_page(error):
            if is_not_found(error):
                raise CommandFailed(f"bucket {target.bucket} does not exist") from None
            if error_code(error) in {"403", "AccessDenied"}:
                raise CommandFailed(
                    f"access denied to bucket {target.bucket}; the credentials need "
                    "s3:ListBucket and s3:ListBucketMultipartUploads on it and "
                    "s3:GetObject, s3:PutObject and s3:AbortMultipartUpload on the prefix"
                ) from None
        raise CommandFailed(
            f"cannot read bucket {target.bucket}: {describe_error(error, 'S3')}"
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

    Each file goes with its CRC-32 as the object's full-object checksum: S3 checks the bytes
    it received against it and refuses the object (``BadDigest``) if the file changed after
    it was hashed. On a failure (or Ctrl-C, which propagates) leaving the transfer manager's
    block cancels the remaining transfers and aborts their multipart uploads, so no partial
    object is ever left looking complete; files that completed before stay and count on the
    next run.
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
                    extra_args={
                        "Metadata": {SHA256_METADATA_KEY: f.sha256},
                        # Named as well as given: some endpoints (moto) keep a checksum only
                        # when the request names its algorithm.
                        "ChecksumAlgorithm": "CRC32",
                        "ChecksumCRC32": f.crc32,
                    },
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


def stored_crc32(client: Any, target: S3Prefix, relative: str) -> str | None:
    """The full-object CRC-32 S3 keeps for an object, or None when it keeps none."""
    with aws_errors(f"read {target.uri(relative)}"):
        head = client.head_object(
            Bucket=target.bucket, Key=target.key(relative), ChecksumMode="ENABLED"
        )
    value = head.get("ChecksumCRC32")
    return str(value) if value else None


def verify_checksums(
    client: Any, target: S3Prefix, files: list[LocalFile], concurrency: int
) -> None:
    """Check that each object just written holds the bytes that were hashed.

    S3 already refuses a mismatch on upload; this reads back the checksum it stored, so that
    an endpoint that stored the object without checking it cannot leave an object that
    contradicts its SHA-256 metadata. Such objects are deleted (this run wrote them; in a
    versioned bucket the previous version stays) and the run fails before the manifest.
    """
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        stored = list(pool.map(lambda f: stored_crc32(client, target, f.relative), files))
    unchecked = [f.relative for f, crc in zip(files, stored, strict=True) if crc is None]
    if unchecked:
        raise CommandFailed(
            f"S3 keeps no CRC-32 checksum for {plural(len(unchecked), 'uploaded object')} "
            f"under {target} ({', '.join(unchecked[:_MAX_LISTED])}), so they cannot be "
            "verified; the manifest was not written"
        )
    changed = [f.relative for f, crc in zip(files, stored, strict=True) if crc != f.crc32]
    if changed:
        delete_objects(client, target, changed)
        raise CommandFailed(
            f"{plural(len(changed), 'file')} changed while being uploaded "
            f"({', '.join(changed[:_MAX_LISTED])}): S3 holds other bytes than the ones hashed, "
            "so those objects were deleted and the manifest was not written. Make sure nothing "
            "writes to the directory, then re-run"
        )


def abort_stale_uploads(client: Any, target: S3Prefix) -> list[str]:
    """Abort the multipart uploads left open under the prefix; return their keys.

    A killed process or a lost connection leaves its multipart uploads open: invisible, yet
    billed for the parts already sent. Any open under the prefix when a run starts belongs to
    an earlier run (two runs on one prefix at once would race on the manifest anyway), so it
    is aborted and its file sent again whole.
    """
    aborted: list[str] = []
    with aws_errors(f"list the open multipart uploads under {target}"):
        pages = client.get_paginator("list_multipart_uploads").paginate(
            Bucket=target.bucket, Prefix=target.prefix
        )
        stale = [(u["Key"], u["UploadId"]) for page in pages for u in page.get("Uploads", [])]
    for key, upload_id in stale:
        try:
            client.abort_multipart_upload(Bucket=target.bucket, Key=key, UploadId=upload_id)
        except Exception as error:
            # Completed or aborted since it was listed: nothing left to do.
            if error_code(error) == "NoSuchUpload":
                continue
            raise CommandFailed(
                f"cannot abort the open multipart upload of s3://{target.bucket}/{key}: "
                f"{describe_error(error, 'S3')}"
            ) from None
        aborted.append(target.relative(key))
    return aborted


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
    report.aborted_uploads = abort_stale_uploads(client, target)
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
        reason = describe_error(outcome.error, "S3") if outcome.error else "not completed"
        if outcome.error is not None and error_code(outcome.error) == _CHECKSUM_MISMATCH:
            reason = "it changed while it was uploaded, S3 refused bytes other than those hashed"
        raise CommandFailed(
            f"upload stopped ({where}{reason}); {len(outcome.done)} of {len(to_send)} files "
            "completed and are kept, the manifest was not written. Re-run the same command "
            "to upload only what is missing"
        )
    verify_checksums(client, target, list(outcome.done), settings.concurrency)
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
