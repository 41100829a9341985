"""A file on its way to S3: what the scan saw of it, what was hashed, and opening exactly it.

Every read of a file after the scan goes through :func:`open_scanned`, which refuses anything
but the very file the scan saw, unchanged.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path


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


def changed_while_read(path: Path) -> FileChangedError:
    return FileChangedError(
        f"{path} changed while it was being read (its size or modification time moved); "
        "make sure nothing writes to the directory, then re-run"
    )
