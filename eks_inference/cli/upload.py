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
* One run at a time per prefix: each run holds the prefix's lease
  (:mod:`eks_inference.cli.upload_lease`) from before it looks at the prefix until it ends, and
  a second run is refused, naming the holder and when its lease expires; so is a run on a
  prefix around or inside one being uploaded, whose objects are partly the same.
* Every file is opened without following links and must be the very file the scan saw (same
  device, inode, size and mtime, still a regular file): a link, FIFO or other file swapped in
  later is refused before a byte of it is read. The bytes are hashed again as they are sent;
  a file that ends early or moves fails the read at once, and an object whose bytes sent
  differ from the bytes hashed is deleted before the manifest.
* Only a completed object counts: S3 does not list a multipart upload until it completes. The
  transfer manager aborts the multipart uploads of a failed or cancelled transfer (Ctrl-C, and
  SIGTERM, which stops an upload the same way); the ones a killed process or a lost
  connection left open under the prefix before this run's lease are aborted by the next run
  before it sends anything (and by the model bucket's lifecycle rule after a few days).
* The manifest (``_manifest.json``) is written last, after every file is verified in the
  bucket and every extra object is deleted; for compiled artifacts the completion marker
  follows it. Both are deleted before anything under the prefix changes, so a prefix with a
  manifest is always complete; if S3 refuses the first deletion of a run that only deletes,
  nothing changed and they are put back. A failed deletion names every key deleted before it.
* Every request, and the run's AWS work as a whole, has a total deadline
  (:mod:`eks_inference.cli.aws_deadline`), so an endpoint that drips its answer cannot hold
  the command.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import io
import json
import os
import re
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
from eks_inference.aws_types import key_characters_problem
from eks_inference.cli.aws import (
    aws_errors,
    describe_error,
    error_code,
    from_web_page,
    is_aws_error,
    is_not_found,
)
from eks_inference.cli.errors import BadInput, CommandFailed, Interrupted
from eks_inference.cli.progress import Advance
from eks_inference.cli.s3uri import S3Prefix
from eks_inference.cli.text import format_bytes, plural, quote_external
from eks_inference.cli.upload_lease import (
    LOCK_SUFFIX,
    Lease,
    LeaseOwner,
    acquire,
    lock_key,
    refuse_overlapping,
)
from eks_inference.cli.upload_manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    SHA256_METADATA_KEY,
    Kind,
    ManifestFile,
    ManifestTooLargeError,
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
# Multipart parts held in memory at once by a transfer (each is read whole, then sent): 1 GiB,
# which keeps the default 16 transfers of 64 MiB parts busy.
MEMORY_BUDGET_MIB = 1024
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
# Lines of a refusal listing shown before "(+N more)".
_MAX_LISTED = 20
# Characters XML 1.0 cannot carry (its Char production), which a DeleteObjects body would need.
_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
# S3's error when the bytes it received do not match the checksum sent with them.
_CHECKSUM_MISMATCH = "BadDigest"


@dataclass(frozen=True)
class FileIdentity:
    """What the scan saw of a file: which file it is (device, inode), its size and mtime.

    Every later open checks the opened file against it, so a file swapped (for a link, a
    FIFO, another file) or changed after the scan is never read as if it were the scanned one.
    """

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, status: os.stat_result) -> FileIdentity:
        """The identity in a ``stat`` result."""
        return cls(status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


@dataclass(frozen=True)
class ScannedFile:
    """A file found by the scan: its key relative to the prefix, its path, what is read.

    ``source`` is the file itself, or for a link inside the directory the real file it leads
    to: it is opened without following links, so a link swapped in later is refused.
    """

    relative: str
    path: Path
    source: Path
    identity: FileIdentity


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
    source: Path
    identity: FileIdentity


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
    took_over_from: LeaseOwner | None = None
    """The owner of the expired (or dead) lease this run took over, if any."""

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
    """The files to upload sorted by key, and the links followed."""

    files: list[ScannedFile]
    total_bytes: int
    links: list[str]
    """One note per symbolic link followed: its key, what it points to and what is uploaded."""


@dataclass
class _Walk:
    root: Path
    files: list[ScannedFile] = field(default_factory=list)
    total_bytes: int = 0
    links: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    outside_links: bool = False


def _reason(error: BaseException) -> str:
    return str(getattr(error, "strerror", None) or error)


def _name_problem(name: str) -> str | None:
    """Why a file or directory name cannot be part of an S3 key, or None.

    Only the characters refused in every key: IAM's pattern characters are refused in the
    prefix that is granted, not in the names below it.
    """
    try:
        name.encode()
    except UnicodeEncodeError:
        return "has a name that is not valid UTF-8, which S3 keys must be; rename it"
    if key_characters_problem(name) is not None:
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
            elif stat.S_ISREG(status.st_mode) and entry.name.endswith(LOCK_SUFFIX):
                walk.problems.append(
                    f"{relative!r} ends in {LOCK_SUFFIX}, the name of the upload's lease "
                    "lock objects; rename it"
                )
            elif stat.S_ISREG(status.st_mode):
                path = Path(entry.path)
                source = path.resolve() if entry.is_symlink() else path
                walk.files.append(ScannedFile(relative, path, source, FileIdentity.of(status)))
                walk.total_bytes += status.st_size
            else:
                walk.problems.append(
                    f"{relative!r} is not a file or directory (a FIFO, socket or device)"
                )
    walk.files.sort(key=lambda f: f.relative)
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
    top_level = {f.relative for f in found if "/" not in f.relative}
    for name in bookkeeping_names(kind):
        if name in top_level:
            raise BadInput(f"{local_dir / name} would collide with the upload's own {name}")
    if kind == "weights":
        if "config.json" not in top_level:
            raise BadInput(f"{local_dir} does not look like a model: no config.json in it")
        if not any(name.endswith(_WEIGHT_SUFFIXES) for name in top_level):
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


class FileChangedError(Exception):
    """A file is not the one the scan found, or changed while it was being read."""


def open_scanned(path: Path, source: Path, identity: FileIdentity) -> int:
    """Open the scanned file for reading, refusing anything but that very file.

    ``O_NOFOLLOW`` refuses a link swapped in for the file, ``O_NONBLOCK`` keeps a FIFO swapped
    in from blocking the open, and the opened file's type, device, inode, size and mtime must
    be those the scan saw: a regular file, and the same one, unchanged.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(source, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise FileChangedError(
                f"{path} was replaced by a symbolic link after the scan; nothing of it was read"
            ) from None
        raise
    try:
        status = os.fstat(fd)
        if stat.S_ISDIR(status.st_mode):
            raise FileChangedError(
                f"{path} was replaced by a directory after the scan; nothing of it was read"
            )
        if not stat.S_ISREG(status.st_mode):
            raise FileChangedError(
                f"{path} is no longer a regular file (a FIFO, socket or device was swapped in "
                "after the scan); nothing of it was read"
            )
        if FileIdentity.of(status) != identity:
            raise FileChangedError(
                f"{path} changed after the scan (another file, size or modification time); "
                "make sure nothing writes to the directory, then re-run"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _changed_while_read(path: Path) -> FileChangedError:
    return FileChangedError(
        f"{path} changed while it was being read (its size or modification time moved); "
        "make sure nothing writes to the directory, then re-run"
    )


def _crc32_base64(crc: int) -> str:
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def file_digests(
    scanned: ScannedFile, advance: Advance | None = None, stop: threading.Event | None = None
) -> tuple[int, str, str]:
    """Size, SHA-256 (hex) and CRC-32 (base64, as S3 takes it) of a file, in one streaming read.

    The file is opened with :func:`open_scanned` and must keep the scan's size and mtime to
    the end, so the three always describe the scanned file. Chunked, so that a 10 GB shard
    needs little memory; ``stop`` ends the read early.
    """
    digest = hashlib.sha256()
    crc = 0
    size = 0
    fd = open_scanned(scanned.path, scanned.source, scanned.identity)
    with os.fdopen(fd, "rb") as stream:
        while chunk := stream.read(_HASH_CHUNK):
            if stop is not None and stop.is_set():
                raise _HashingStoppedError
            digest.update(chunk)
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
            if advance is not None:
                advance(len(chunk))
        if size != scanned.identity.size or FileIdentity.of(os.fstat(fd)) != scanned.identity:
            raise _changed_while_read(scanned.path)
    return size, digest.hexdigest(), _crc32_base64(crc)


def hash_files(
    files: Iterable[ScannedFile], concurrency: int, advance: Advance | None = None
) -> list[LocalFile]:
    """Size and hash every file, several at once (hashlib releases the GIL on large reads).

    The first unreadable or changed file, Ctrl-C or SIGTERM stops every other hash within one
    chunk.
    """
    stop = threading.Event()

    def one(scanned: ScannedFile) -> LocalFile:
        try:
            size, sha256, crc32 = file_digests(scanned, advance, stop)
        except FileChangedError as error:
            raise CommandFailed(f"{error}; nothing was uploaded") from None
        except OSError as error:
            raise CommandFailed(f"cannot read {scanned.path}: {error.strerror or error}") from None
        return LocalFile(
            scanned.relative,
            scanned.path,
            size,
            sha256,
            crc32,
            scanned.source,
            scanned.identity,
        )

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
                    "s3:GetObject, s3:PutObject and s3:AbortMultipartUpload on the prefix, and "
                    "s3:GetObject, s3:PutObject and s3:DeleteObject on the lease's lock object "
                    f"{lock_key(target)}"
                ) from None
        raise CommandFailed(
            f"cannot read bucket {target.bucket}: {describe_error(error, 'S3')}"
        ) from None


def list_objects(client: Any, target: S3Prefix) -> dict[str, int]:
    """Completed objects under the prefix: relative key to size.

    Folder markers are left out, and so are the lease locks of prefixes inside this one
    (:mod:`eks_inference.cli.upload_lease`): they belong to those prefixes' uploads, not to
    this one's files, so they are never extra objects to list or delete.
    """
    objects: dict[str, int] = {}
    with aws_errors(f"list {target}"):
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=target.bucket, Prefix=target.prefix
        ):
            for item in page.get("Contents", []):
                if not item["Key"].endswith(("/", LOCK_SUFFIX)):
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


class SentFile(io.RawIOBase):
    """A file as the transfer reads it: opened checked, hashed as sent, never past its size.

    The transfer manager and botocore read it in passes (botocore reads a single PUT's body
    once to sign it and again to send it, and again on a retry); each pass starts at offset 0,
    opens the file afresh with :func:`open_scanned` and hashes what it reads, so the digests
    left after the last pass are those of the bytes that went to S3. A file that ends early or
    whose size or mtime moves fails the read at once, instead of leaving S3 waiting for bytes
    that never come; reads stop at the scanned size, so a file that grows never sends more
    than the length announced.
    """

    def __init__(self, local: LocalFile) -> None:
        super().__init__()
        self.local = local
        self.problem: FileChangedError | None = None
        self._fd: int | None = None
        self._position = 0
        self._sha256 = hashlib.sha256()
        self._crc = 0
        self._hashed = 0
        self._in_order = True

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.local.size}
        self._position = base[whence] + offset
        return self._position

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the current offset, hashed when they continue the pass."""
        try:
            return self._read(size)
        except FileChangedError as error:
            self.problem = error
            self._close_fd()
            raise

    def _read(self, size: int | None) -> bytes:
        expected = self.local.size
        remaining = expected - self._position
        if remaining <= 0:
            return b""
        amount = remaining if size is None or size < 0 else min(size, remaining)
        if self._position == 0:
            self._close_fd()
            self._sha256, self._crc, self._hashed, self._in_order = hashlib.sha256(), 0, 0, True
        if self._fd is None:
            self._fd = open_scanned(self.local.path, self.local.source, self.local.identity)
        data = os.pread(self._fd, amount, self._position)
        if len(data) < amount and self._position + len(data) < expected:
            raise _changed_while_read(self.local.path)
        if self._position == self._hashed:
            self._sha256.update(data)
            self._crc = zlib.crc32(data, self._crc)
            self._hashed += len(data)
        else:
            self._in_order = False
        self._position += len(data)
        if self._position == expected:
            if FileIdentity.of(os.fstat(self._fd)) != self.local.identity:
                raise _changed_while_read(self.local.path)
            self._close_fd()
        return data

    def sent_as_hashed(self) -> bool:
        """True when the last pass read the whole file, in order, and it hashed as before."""
        return (
            self._in_order
            and self._hashed == self.local.size
            and self._sha256.hexdigest() == self.local.sha256
            and _crc32_base64(self._crc) == self.local.crc32
        )

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._close_fd()
        super().close()


@dataclass(frozen=True)
class TransferOutcome:
    """Files that completed, files that did not, and the error that stopped the transfer."""

    done: tuple[LocalFile, ...]
    not_done: tuple[LocalFile, ...]
    error: BaseException | None = None
    failed_file: LocalFile | None = None
    changed: tuple[LocalFile, ...] = ()
    """Completed files whose bytes sent differ from the bytes hashed before."""
    problem: FileChangedError | None = None
    """Why a file could not be sent as scanned, when that stopped the transfer."""


def transfer(
    client: Any,
    target: S3Prefix,
    files: list[LocalFile],
    settings: UploadSettings,
    advance: Advance | None = None,
) -> TransferOutcome:
    """Upload ``files`` in parallel, multipart above the part size; stop at the first failure.

    Each file is read through a :class:`SentFile`, which hashes the bytes as they are sent,
    and goes with its CRC-32 as the object's full-object checksum: S3 checks the bytes it
    received against it and refuses the object (``BadDigest``) if the file changed after it
    was hashed. Multipart parts are read into memory before they are sent, at most
    :data:`MEMORY_BUDGET_MIB` worth at once (and one part when a part is larger). On a
    failure (or Ctrl-C, which propagates) leaving the transfer manager's block cancels the
    remaining transfers and aborts their multipart uploads, so no partial object is ever left
    looking complete; files that completed before stay and count on the next run.
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
    # An s3transfer setting boto3's constructor does not take.
    config.max_in_memory_upload_chunks = max(
        1, min(settings.concurrency, MEMORY_BUDGET_MIB // settings.part_size_mib)
    )
    subscribers = [_ProgressSubscriber(advance)] if advance is not None else []
    futures: list[tuple[LocalFile, Any]] = []
    readers = {f.relative: SentFile(f) for f in files}
    error: BaseException | None = None
    failed_file: LocalFile | None = None
    try:
        with create_transfer_manager(client, config) as manager:
            for f in files:
                future = manager.upload(
                    readers[f.relative],
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
    finally:
        for reader in readers.values():
            reader.close()
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
    changed = tuple(f for f in done if not readers[f.relative].sent_as_hashed())
    # The failed file's own problem first: the others may only have been cut short by it.
    problem = readers[failed_file.relative].problem if failed_file is not None else None
    problem = problem or next((r.problem for r in readers.values() if r.problem), None)
    return TransferOutcome(
        tuple(done),
        tuple(not_done),
        error,
        failed_file,
        changed,
        problem,
    )


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


def abort_stale_uploads(client: Any, target: S3Prefix, before: datetime) -> list[str]:
    """Abort the multipart uploads left open under the prefix before ``before``; their keys.

    A killed process or a lost connection leaves its multipart uploads open: invisible, yet
    billed for the parts already sent. ``before`` is the lease's
    :attr:`~eks_inference.cli.upload_lease.Lease.stale_before` (S3's time): uploads begun
    earlier belong to runs that no longer hold the prefix, so they are aborted and their files
    sent again whole; later ones are some other live run's and are left alone.
    """
    aborted: list[str] = []
    with aws_errors(f"list the open multipart uploads under {target}"):
        pages = client.get_paginator("list_multipart_uploads").paginate(
            Bucket=target.bucket, Prefix=target.prefix
        )
        stale = [
            (u["Key"], u["UploadId"])
            for page in pages
            for u in page.get("Uploads", [])
            if u["Initiated"] < before
        ]
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


def _fits_xml(key: str) -> bool:
    """True when ``key`` can travel in an XML 1.0 request body (DeleteObjects' is one).

    S3 keys may hold characters XML 1.0 cannot carry (most control characters, lone
    surrogates, U+FFFE/U+FFFF); such keys are deleted one by one, with the key in the URL.
    """
    return _XML_INVALID.search(key) is None


class DeletionError(CommandFailed):
    """A deletion stopped: which keys were deleted before it, and whether S3 refused it.

    ``refused`` is True when S3 answered with an error, so the failed request deleted nothing;
    after a lost connection nobody knows.
    """

    def __init__(self, deleted: list[str], key: str, reason: str, *, refused: bool) -> None:
        done = ", ".join(quote_external(k) for k in deleted[:_MAX_LISTED])
        more = f" (+{len(deleted) - _MAX_LISTED} more)" if len(deleted) > _MAX_LISTED else ""
        super().__init__(
            f"cannot delete {quote_external(key)}: {reason}; deleted before it: "
            f"{done or 'none'}{more}"
        )
        self.deleted = deleted
        self.refused = refused


def delete_objects(client: Any, target: S3Prefix, relatives: list[str]) -> list[str]:
    """Delete objects by relative key and return the keys deleted, in order.

    Keys that fit XML go 1000 per request (the API's limit), the others one per request. A
    failure names the key it stopped at and every key deleted before it, so that nobody has
    to guess what is left.
    """
    deleted: list[str] = []
    batchable = [k for k in relatives if _fits_xml(target.key(k))]
    for key in (k for k in relatives if not _fits_xml(target.key(k))):
        try:
            client.delete_object(Bucket=target.bucket, Key=target.key(key))
        except Exception as error:
            if not is_aws_error(error):
                raise
            raise DeletionError(
                deleted, key, describe_error(error, "S3"), refused=error_code(error) is not None
            ) from None
        deleted.append(key)
    for start in range(0, len(batchable), 1000):
        batch = batchable[start : start + 1000]
        try:
            response = client.delete_objects(
                Bucket=target.bucket,
                Delete={"Objects": [{"Key": target.key(k)} for k in batch], "Quiet": True},
            )
        except Exception as error:
            if not is_aws_error(error):
                raise
            raise DeletionError(
                deleted,
                batch[0],
                describe_error(error, "S3"),
                refused=error_code(error) is not None,
            ) from None
        failed = {target.relative(e.get("Key", "")): e for e in response.get("Errors", [])}
        deleted += [k for k in batch if k not in failed]
        if failed:
            key, first = next(iter(failed.items()))
            reason = f"{first.get('Code')} {first.get('Message', '')}".strip()
            raise DeletionError(deleted, key, reason, refused=True)
    return deleted


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
    """The manifest at ``key``, or None when there is none; unreadable ones raise.

    At most :data:`MAX_MANIFEST_BYTES` are read: a larger object (by its length, or by its
    bytes when the length is wrong) raises :class:`ManifestTooLargeError` with its body left
    unread, so a hostile or mistaken object cannot fill memory.
    """
    try:
        response = client.get_object(Bucket=bucket, Key=key)
    except Exception as error:
        if is_not_found(error):
            return None
        raise
    stream = response["Body"]
    too_large = ManifestTooLargeError(
        f"s3://{bucket}/{key} is larger than the {format_bytes(MAX_MANIFEST_BYTES)} an upload "
        "manifest can be, so it was not read; it is not a manifest this tool wrote"
    )
    try:
        if int(response.get("ContentLength") or 0) > MAX_MANIFEST_BYTES:
            raise too_large
        body = stream.read(MAX_MANIFEST_BYTES + 1)
        if len(body) > MAX_MANIFEST_BYTES:
            raise too_large
    finally:
        stream.close()
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
    """Upload hashed local files to ``target`` following the rules of this module.

    The whole run holds the prefix's lease (:mod:`eks_inference.cli.upload_lease`), released
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
            f"({', '.join(quote_external(k) for k in changed[:_MAX_LISTED])}): the bytes "
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
