"""What the prefix holds in S3, against the local files: before a run changes anything.

The bucket must be there and readable; the completed objects under the prefix are listed and
compared with the local files by size and SHA-256; what would be replaced or deleted without
permission is refused; and the multipart uploads earlier runs left open are aborted.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from eks_inference.ops.aws.errors import (
    aws_errors,
    describe_error,
    error_code,
    from_web_page,
    is_not_found,
)
from eks_inference.ops.errors import CommandFailed
from eks_inference.ops.s3uri import S3Prefix
from eks_inference.ops.upload import MAX_LISTED
from eks_inference.ops.upload.files import LocalFile
from eks_inference.ops.upload.lease import LOCK_SUFFIX, lock_key
from eks_inference.ops.upload.manifest import SHA256_METADATA_KEY, Kind, bookkeeping_names
from eks_inference.ops.upload.settings import UploadSettings


@dataclass(frozen=True)
class Comparison:
    """Local files against the objects under the prefix."""

    missing: tuple[LocalFile, ...]
    unchanged: tuple[LocalFile, ...]
    differing: tuple[tuple[LocalFile, str], ...]
    extra: tuple[str, ...]
    bookkeeping: frozenset[str]
    """Bookkeeping objects (manifest, completion marker) present under the prefix."""


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
    (:mod:`eks_inference.ops.upload.lease`): they belong to those prefixes' uploads, not to
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
    lines += items[:MAX_LISTED]
    if len(items) > MAX_LISTED:
        lines.append(f"  (+{len(items) - MAX_LISTED} more)")
    hints = []
    if blocked_diff:
        hints.append("--overwrite to replace differing objects")
    if blocked_extra:
        hints.append("--delete to remove extra objects")
    lines.append("pass " + " and ".join(hints))
    return "\n".join(lines)


def abort_stale_uploads(client: Any, target: S3Prefix, before: datetime) -> list[str]:
    """Abort the multipart uploads left open under the prefix before ``before``; their keys.

    A killed process or a lost connection leaves its multipart uploads open: invisible, yet
    billed for the parts already sent. ``before`` is the lease's
    :attr:`~eks_inference.ops.upload.lease.Lease.stale_before` (S3's time): uploads begun
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
