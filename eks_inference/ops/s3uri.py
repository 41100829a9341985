"""``s3://bucket/prefix/`` URIs, parsed strictly: a typo must not upload to the wrong place."""

from __future__ import annotations

from dataclasses import dataclass

from eks_inference.ops.errors import BadInput
from eks_inference.specification.aws_types import bucket_name_problem, key_prefix_problem


@dataclass(frozen=True)
class S3Prefix:
    """A key prefix (ending in ``/``) in a bucket."""

    bucket: str
    prefix: str

    def key(self, relative: str) -> str:
        """The full key of a path relative to the prefix."""
        return self.prefix + relative

    def relative(self, key: str) -> str:
        """The path of a full key relative to the prefix."""
        return key.removeprefix(self.prefix)

    def uri(self, relative: str = "") -> str:
        """``s3://bucket/prefix/relative``."""
        return f"s3://{self.bucket}/{self.prefix}{relative}"

    def __str__(self) -> str:
        return self.uri()


def parse_prefix_uri(uri: str) -> S3Prefix:
    """Parse ``s3://BUCKET/PREFIX/``; the prefix must be non-empty and end with ``/``.

    The trailing slash is required because S3 prefixes are plain string prefixes:
    ``models/llama`` would also match ``models/llama-70b/``. The prefix obeys the one prefix
    rule (:func:`~eks_inference.specification.aws_types.key_prefix_problem`), IAM's pattern
    characters
    included, so what is uploaded here is a prefix a deployment can be granted.
    """
    if not uri.startswith("s3://"):
        raise BadInput(f"{uri!r} is not an S3 URI; expected s3://BUCKET/PREFIX/")
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    problem = bucket_name_problem(bucket)
    if problem is not None:
        raise BadInput(f"{uri!r}: {problem}")
    if not prefix:
        # The example keeps the bucket as given and adds one segment: a fixed "models/" would
        # read s3://models/models/NAME/ for a bucket named models.
        raise BadInput(f"{uri!r} has no key prefix; give one, e.g. s3://{bucket}/MODEL/")
    problem = key_prefix_problem(prefix, name="the prefix")
    if problem is not None:
        raise BadInput(f"{uri!r}: {problem}")
    return S3Prefix(bucket=bucket, prefix=prefix)
