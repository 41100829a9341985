"""How one upload runs: part size, parallelism, what it uploads and what it may replace."""

from __future__ import annotations

from dataclasses import dataclass

from eks_inference.ops.upload.manifest import Kind

MIB = 1024**2
# S3's smallest multipart part (except the last) and its largest part.
MIN_PART_SIZE_MIB = 5
MAX_PART_SIZE_MIB = 5 * 1024


@dataclass(frozen=True)
class UploadSettings:
    """How to upload; ``overwrite`` and ``delete`` allow replacing and removing objects."""

    part_size_mib: int
    concurrency: int
    kind: Kind = "weights"
    overwrite: bool = False
    delete: bool = False
