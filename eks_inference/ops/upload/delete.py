"""Deleting objects under the prefix, and saying exactly which were deleted when one fails."""

from __future__ import annotations

import re
from typing import Any

from eks_inference.ops.aws.errors import describe_error, error_code, is_aws_error
from eks_inference.ops.errors import CommandFailed
from eks_inference.ops.s3uri import S3Prefix
from eks_inference.ops.text import quote_external
from eks_inference.ops.upload import MAX_LISTED

# Characters XML 1.0 cannot carry (its Char production), which a DeleteObjects body would need.
_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


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
        done = ", ".join(quote_external(k) for k in deleted[:MAX_LISTED])
        more = f" (+{len(deleted) - MAX_LISTED} more)" if len(deleted) > MAX_LISTED else ""
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
