"""Each file's size, SHA-256 and CRC-32, computed locally in one streaming read per file.

The SHA-256 goes into the object's metadata, so a later run can tell an identical object from
a different one of the same size; the CRC-32 goes with the object as its full-object checksum,
so S3 refuses bytes other than the ones hashed.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import zlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from eks_inference.ops.errors import CommandFailed, Interrupted
from eks_inference.ops.progress import Advance
from eks_inference.ops.upload.files import (
    FileChangedError,
    FileIdentity,
    LocalFile,
    ScannedFile,
    changed_while_read,
    open_scanned,
)
from eks_inference.ops.upload.settings import MIB

_HASH_CHUNK = 8 * MIB


class _HashingStoppedError(Exception):
    """Another file failed or the run was interrupted: the remaining hashes are not needed."""


def crc32_base64(crc: int) -> str:
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
            raise changed_while_read(scanned.path)
    return size, digest.hexdigest(), crc32_base64(crc)


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
