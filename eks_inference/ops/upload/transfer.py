"""Sending the files: in parallel, multipart above the part size, hashed again as they go.

Only a completed object counts (S3 does not list a multipart upload until it completes), and
a failed or cancelled transfer aborts its multipart uploads.
"""

from __future__ import annotations

import hashlib
import io
import os
import zlib
from dataclasses import dataclass
from typing import Any

from eks_inference.ops.progress import Advance
from eks_inference.ops.s3uri import S3Prefix
from eks_inference.ops.upload.files import (
    FileChangedError,
    FileIdentity,
    LocalFile,
    changed_while_read,
    open_scanned,
)
from eks_inference.ops.upload.hashing import crc32_base64
from eks_inference.ops.upload.manifest import SHA256_METADATA_KEY
from eks_inference.ops.upload.settings import MIB, UploadSettings

# Multipart parts held in memory at once by a transfer (each is read whole, then sent): 1 GiB,
# which keeps the default 16 transfers of 64 MiB parts busy.
MEMORY_BUDGET_MIB = 1024


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
            raise changed_while_read(self.local.path)
        if self._position == self._hashed:
            self._sha256.update(data)
            self._crc = zlib.crc32(data, self._crc)
            self._hashed += len(data)
        else:
            self._in_order = False
        self._position += len(data)
        if self._position == expected:
            if FileIdentity.of(os.fstat(self._fd)) != self.local.identity:
                raise changed_while_read(self.local.path)
            self._close_fd()
        return data

    def sent_as_hashed(self) -> bool:
        """True when the last pass read the whole file, in order, and it hashed as before."""
        return (
            self._in_order
            and self._hashed == self.local.size
            and self._sha256.hexdigest() == self.local.sha256
            and crc32_base64(self._crc) == self.local.crc32
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
