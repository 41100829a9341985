"""The manifest ``upload`` writes last under a prefix, and ``preflight`` checks against:
its format, and reading and writing it in S3.

Its presence means every listed object was uploaded completely: it is written only after all
files succeeded, and removed before a re-upload changes anything under the prefix.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

from eks_inference.ops.aws.errors import aws_errors, is_not_found
from eks_inference.ops.s3uri import S3Prefix
from eks_inference.ops.text import format_bytes
from eks_inference.ops.upload.files import LocalFile
from eks_inference.specification.artifacts import COMPLETION_MARKER_NAME

MANIFEST_NAME = "_manifest.json"
# The largest manifest read: an entry takes at most about 1.2 KB (a 1024-byte key, the SHA-256,
# the size), so 16 MiB holds over 13,000 files of the longest keys and about 100,000 of usual
# ones, far beyond any model; a larger object is refused unread instead of filling memory.
MAX_MANIFEST_BYTES = 16 * 1024**2
# Object metadata key holding a file's SHA-256 (sent as the x-amz-meta-sha256 header).
SHA256_METADATA_KEY = "sha256"

Kind = Literal["weights", "artifacts", "adapter"]


class ManifestFile(BaseModel):
    """One uploaded file: its key relative to the prefix, size and SHA-256."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(min_length=1)
    size: NonNegativeInt
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class UploadManifest(BaseModel):
    """What a completed upload put under a prefix."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal[1] = 1
    kind: Kind
    created: datetime
    files: tuple[ManifestFile, ...]

    @property
    def total_bytes(self) -> int:
        """Bytes of all listed files."""
        return sum(f.size for f in self.files)


class ManifestTooLargeError(ValueError):
    """An object at a manifest's key is larger than :data:`MAX_MANIFEST_BYTES`."""


def manifest_key(prefix: str) -> str:
    """The manifest's key for a prefix ending in ``/``."""
    return prefix + MANIFEST_NAME


def bookkeeping_names(kind: Kind) -> tuple[str, ...]:
    """Objects under the prefix that record an upload rather than being part of it.

    Compiled artifacts also get the completion marker that serving and preflight look for.
    """
    return (MANIFEST_NAME, COMPLETION_MARKER_NAME) if kind == "artifacts" else (MANIFEST_NAME,)


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


def manifest_matches(client: Any, target: S3Prefix, files: list[LocalFile]) -> bool:
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
