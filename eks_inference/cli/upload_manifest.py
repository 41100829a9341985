"""The manifest ``upload`` writes last under a prefix, and ``preflight`` checks against.

Its presence means every listed object was uploaded completely: it is written only after all
files succeeded, and removed before a re-upload changes anything under the prefix.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

MANIFEST_NAME = "_manifest.json"
# The largest manifest read: an entry takes at most about 1.2 KB (a 1024-byte key, the SHA-256,
# the size), so 16 MiB holds over 13,000 files of the longest keys and about 100,000 of usual
# ones, far beyond any model; a larger object is refused unread instead of filling memory.
MAX_MANIFEST_BYTES = 16 * 1024**2
# Object metadata key holding a file's SHA-256 (sent as the x-amz-meta-sha256 header).
SHA256_METADATA_KEY = "sha256"

Kind = Literal["weights", "artifacts"]


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
