"""After the transfer: every file is a complete object of its size, holding the bytes hashed.

Checked before the manifest is written, so a manifest never lists an object that is missing,
short or other than the file hashed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from eks_inference.ops.aws.errors import aws_errors
from eks_inference.ops.errors import CommandFailed
from eks_inference.ops.s3uri import S3Prefix
from eks_inference.ops.text import plural
from eks_inference.ops.upload import MAX_LISTED
from eks_inference.ops.upload.delete import delete_objects
from eks_inference.ops.upload.files import LocalFile
from eks_inference.ops.upload.remote import list_objects


def verify(client: Any, target: S3Prefix, files: list[LocalFile]) -> None:
    """Check that every file is now a complete object of the right size."""
    remote = list_objects(client, target)
    wrong = [f.relative for f in files if remote.get(f.relative) != f.size]
    if wrong:
        raise CommandFailed(
            f"after upload, {len(wrong)} objects under {target} are missing or have the wrong "
            f"size ({', '.join(wrong[:MAX_LISTED])}); the manifest was not written, re-run"
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
            f"under {target} ({', '.join(unchecked[:MAX_LISTED])}), so they cannot be "
            "verified; the manifest was not written"
        )
    changed = [f.relative for f, crc in zip(files, stored, strict=True) if crc != f.crc32]
    if changed:
        delete_objects(client, target, changed)
        raise CommandFailed(
            f"{plural(len(changed), 'file')} changed while being uploaded "
            f"({', '.join(changed[:MAX_LISTED])}): S3 holds other bytes than the ones hashed, "
            "so those objects were deleted and the manifest was not written. Make sure nothing "
            "writes to the directory, then re-run"
        )
