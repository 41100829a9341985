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

from eks_inference.specification.validation import rule_error

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
# Refused in every key: control characters, and what URLs and paths read specially.
_UNSAFE_KEY_CHARACTERS = re.compile(r"[\x00-\x1f\x7f?#\\]")
# Read specially by IAM in a resource ARN and in StringLike/ArnLike condition values
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html): '*'
# and '?' are wildcards and '${...}' is a policy variable. A prefix is granted as the pattern
# '<prefix>*' (and as the s3:prefix condition), so any of them in a prefix would widen the
# grant beyond the prefix written; '?' is refused with the unsafe key characters already.
_IAM_PATTERN_CHARACTERS = re.compile(r"[*${}]")
# AWS partitions: aws, aws-cn, aws-us-gov, aws-iso, aws-iso-b, ...
_PARTITION = r"aws(-[a-z]+)*"
# IAM role ARNs (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html):
# an optional path of '/'-separated names, then the role name of at most 64 characters. Path
# segments take the role name's characters, not IAM's wider path alphabet, so that no '*' or
# '?' can make the ARN a pattern.
_ROLE_NAME_CHARACTERS = r"[A-Za-z0-9_+=,.@-]"
IAM_ROLE_ARN_PATTERN = (
    rf"^arn:{_PARTITION}:iam::\d{{12}}:role/({_ROLE_NAME_CHARACTERS}+/)*"
    rf"{_ROLE_NAME_CHARACTERS}{{1,64}}$"
)


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


def key_characters_problem(key: str) -> str | None:
    """What makes ``key`` (a whole key, or one name in it) a key this project refuses, or
    ``None``: a control character, ``?``, ``#`` or ``\\``, which URLs and paths read
    specially. Keys below a granted prefix may hold IAM's pattern characters: the grant is
    read from the prefix, never from the keys under it."""
    if _UNSAFE_KEY_CHARACTERS.search(key):
        return "has a control character, '?', '#' or '\\'"
    return None


def key_prefix_problem(prefix: str, *, name: str = "key prefix") -> str | None:
    """What makes ``prefix`` unusable as a key prefix in a bucket, or ``None``.

    A prefix is a key, not a URI or a path: no ``s3://``, no leading ``/``, no empty or ``..``
    segment, no control characters or ``?``, ``#`` and ``\\``, and it ends with ``/``: S3
    prefixes are plain string prefixes, so ``models/llama`` would also match
    ``models/llama-70b/``. Nor ``*``, ``$``, ``{`` or ``}``: IAM grants read a prefix as a
    pattern, so ``*/`` would grant every prefix of the bucket. This is the one rule every
    prefix goes through (the specs, the bucket's grants, Mountpoint volumes and the S3 URIs of
    the CLI), so a prefix accepted anywhere grants exactly itself. The message calls the value
    ``name`` and suggests the prefix the user most likely meant.
    """
    example = suggested_key_prefix(prefix)
    hint = f", e.g. {example}" if example else ""
    characters = key_characters_problem(prefix)
    if characters is not None:
        return f"{name} {prefix!r} {characters}{hint}"
    pattern = _IAM_PATTERN_CHARACTERS.search(prefix)
    if pattern is not None:
        return (
            f"{name} {prefix!r} has {pattern.group()!r}, which IAM reads as a wildcard or "
            "policy variable, so the grant would reach other prefixes; write the prefix "
            f"literally{hint or ', e.g. models/llama-3-8b/'}"
        )
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
    IAM's pattern characters taken out, empty, ``.`` and ``..`` segments removed and a trailing
    ``/`` added (empty if none is left).
    """
    key = value.removeprefix("s3://").split("/", 1)[-1] if value.startswith("s3://") else value
    literal = _IAM_PATTERN_CHARACTERS.sub("", key)
    segments = [s for s in literal.split("/") if s not in ("", ".", "..")]
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
    rf"^arn:{_PARTITION}:acm:[a-z]{{2}}(-[a-z]+)+-\d:\d{{12}}:certificate/[0-9a-f-]{{36}}$"
)
CertificateArn = Annotated[str, Field(pattern=CERTIFICATE_ARN_PATTERN)]
"""The ARN of an AWS Certificate Manager certificate."""


def iam_role_arn_problem(arn: str, *, name: str = "role ARN") -> str | None:
    """What makes ``arn`` other than the ARN of one IAM role, or ``None``.

    Only ``arn:<partition>:iam::<12 digits>:role/[<path>/]<name>``: no wildcard, no user, no
    account root, so a principal given access (the cluster-admin access entry) is exactly one
    role.
    """
    if re.fullmatch(IAM_ROLE_ARN_PATTERN, arn):
        return None
    return (
        f"{name} {arn!r} is not an IAM role ARN; give one role, e.g. "
        "arn:aws:iam::123456789012:role/PlatformAdmin"
    )


def public_access_cidr_problem(cidr: str, *, name: str = "CIDR") -> str | None:
    """What makes ``cidr`` unusable as a network allowed to reach a public endpoint, or ``None``.

    It must be an IPv4 network in CIDR notation with the host bits zero (``203.0.113.7/24`` is
    more likely a typo for a /32 than a /24, so it is refused rather than widened). Not
    ``0.0.0.0/0``: a cluster API open to the whole internet is what the private default
    exists to prevent. Operators outside the VPC name the networks they connect from; inside
    it (or over a VPN or a bastion) the private endpoint needs no CIDR at all.
    """
    try:
        network = ipaddress.IPv4Network(cidr, strict=True)
    except ValueError as error:
        return (
            f"{name} {cidr!r} is not an IPv4 network in CIDR notation ({error}); write it as "
            "address/prefix-length with the host bits zero, e.g. 203.0.113.0/24"
        )
    if network.prefixlen == 0:
        return (
            f"{name} {cidr!r} opens the endpoint to the whole internet; name the networks "
            "that need it, e.g. 203.0.113.0/24, or leave it out and use the private endpoint"
        )
    return None


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
