"""AWS identifiers as annotated types: the one definition of each naming rule.

The specs, the constructs and the CLI all take bucket names, key prefixes, regions, account
ids and capacity types. Each rule is written once here, as a plain check (``*_problem``,
returning what is wrong or ``None``: the specs add it to their list of problems, the constructs
and the CLI raise it), or as an ``Annotated`` type where a pattern says it all. A prefix the
spec accepts is then one the IAM grant and the uploader accept.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo

from eks_inference.validation import rule_error

# S3 general purpose bucket naming rules
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_RESERVED_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_RESERVED_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
REGION_PATTERN = r"^[a-z]{2}(-[a-z]+)+-\d$"
ZONE_PATTERN = r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$"
ACCOUNT_ID_PATTERN = r"^\d{12}$"
# A key is at most 1,024 bytes; a prefix leaves room for the file names below it.
_MAX_PREFIX_BYTES = 512
_UNSAFE_KEY_CHARACTERS = re.compile(r"[\x00-\x1f\x7f?#\\]")


def bucket_name_problem(name: str) -> str | None:
    """What makes ``name`` an invalid S3 bucket name, or ``None``."""
    rule = "3-63 lowercase letters, digits, '.' or '-', starting and ending with a letter or digit"
    if not _BUCKET_NAME.match(name) or ".." in name:
        return f"{name!r} is not a valid bucket name ({rule})"
    if _is_ip_address(name):
        return f"{name!r} is formatted as an IP address, which S3 does not allow for bucket names"
    reserved = [p for p in _RESERVED_BUCKET_PREFIXES if name.startswith(p)] + [
        s for s in _RESERVED_BUCKET_SUFFIXES if name.endswith(s)
    ]
    if reserved:
        return f"{name!r} uses {reserved[0]!r}, which S3 reserves; choose another bucket name"
    return None


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return False
    return True


def key_prefix_problem(prefix: str, *, name: str = "key prefix") -> str | None:
    """What makes ``prefix`` unusable as a key prefix in a bucket, or ``None``.

    A prefix is a key, not a URI or a path: no ``s3://``, no leading ``/``, no empty or ``..``
    segment, no control characters or ``?``, ``#`` and ``\\``, and it ends with ``/``: S3
    prefixes are plain string prefixes, so ``models/llama`` would also match
    ``models/llama-70b/``. The message calls the value ``name`` and suggests the prefix the user
    most likely meant.
    """
    example = suggested_key_prefix(prefix)
    hint = f", e.g. {example}" if example else ""
    if _UNSAFE_KEY_CHARACTERS.search(prefix):
        return f"{name} {prefix!r} has a control character, '?', '#' or '\\'{hint}"
    if len(prefix.encode()) > _MAX_PREFIX_BYTES:
        return f"{name} of {len(prefix.encode())} bytes is longer than {_MAX_PREFIX_BYTES}"
    if prefix.startswith(("s3://", "/")) or not prefix.endswith("/"):
        return f"{name} {prefix!r} must be a key prefix inside the bucket ending with '/'{hint}"
    segments = prefix[:-1].split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        return f"{name} {prefix!r} has an empty path segment ('//') or a '.' or '..' one{hint}"
    return None


def suggested_key_prefix(value: str) -> str:
    """The key prefix ``value`` most likely meant: the bucket of an ``s3://`` URI dropped,
    empty, ``.`` and ``..`` segments removed and a trailing ``/`` added (empty if none is left).
    """
    key = value.removeprefix("s3://").split("/", 1)[-1] if value.startswith("s3://") else value
    segments = [s for s in key.split("/") if s not in ("", ".", "..")]
    return "/".join(segments) + "/" if segments else ""


Region = Annotated[str, Field(pattern=REGION_PATTERN)]
"""An AWS region name such as ``us-east-1``."""
AccountId = Annotated[str, Field(pattern=ACCOUNT_ID_PATTERN)]
"""A 12-digit AWS account id."""
CapacityType = Literal["ON_DEMAND", "SPOT", "RESERVED"]
"""EC2 purchasing option of a node pool, in the EKS API's spelling; ``RESERVED`` (On-Demand
Capacity Reservations) is Karpenter's, which managed node groups do not take."""
# An ACM certificate in any partition (arn:aws:, arn:aws-cn:, arn:aws-us-gov:).
CERTIFICATE_ARN_PATTERN = (
    r"^arn:aws(-[a-z]+)*:acm:[a-z]{2}(-[a-z]+)+-\d:\d{12}:certificate/[0-9a-f-]{36}$"
)
CertificateArn = Annotated[str, Field(pattern=CERTIFICATE_ARN_PATTERN)]
"""The ARN of an AWS Certificate Manager certificate."""


def _valid_bucket_name(name: str) -> str:
    problem = bucket_name_problem(name)
    if problem is not None:
        raise rule_error(problem)
    return name


def _valid_key_prefix(prefix: str, info: ValidationInfo) -> str:
    field = (info.field_name or "key prefix").replace("_", " ")
    problem = key_prefix_problem(prefix, name=field)
    if problem is not None:
        raise rule_error(problem)
    return prefix


BucketName = Annotated[str, AfterValidator(_valid_bucket_name)]
"""An S3 general purpose bucket name (see :func:`bucket_name_problem`)."""
KeyPrefix = Annotated[str, AfterValidator(_valid_key_prefix)]
"""A key prefix inside a bucket, ending with ``/`` (see :func:`key_prefix_problem`)."""
