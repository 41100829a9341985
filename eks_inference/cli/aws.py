"""The one place the CLI creates AWS clients, and how AWS errors read.

Clients come from a :class:`boto3.Session`, so the standard configuration applies unchanged:
profiles (``AWS_PROFILE`` or ``--profile``), ``AWS_DEFAULT_REGION``, credentials from the
usual chain, and ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_<SERVICE>`` (honoured by boto3
itself, which is how tests point the CLI at a local S3/EC2 emulator).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ProfileNotFound,
)

from eks_inference.cli.errors import BadInput, CommandFailed

# Standard retry mode backs off on throttling and transient errors, which large uploads and
# region-wide describe calls do meet.
_CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5}, user_agent_extra="eks-inference"
)

_DENIED = {
    "AccessDenied",
    "AccessDeniedException",
    "AllAccessDisabled",
    "Forbidden",
    "UnauthorizedOperation",
    "403",
}
_BAD_CREDENTIALS = {
    "AuthFailure",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidAccessKeyId",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
}
_THROTTLED = {"SlowDown", "Throttling", "ThrottlingException", "TooManyRequestsException"}


class Aws:
    """Clients from one session, so that every call of a command uses the same identity."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def client(self, service: str, region: str | None = None) -> Any:
        """A client for ``service``, in ``region`` or the session's default region."""
        try:
            return self.session.client(service, region_name=region, config=_CLIENT_CONFIG)
        except NoRegionError:
            raise BadInput(
                "no AWS region configured; set AWS_DEFAULT_REGION or a profile's region"
            ) from None


def connect(profile: str | None = None) -> Aws:
    """A session with the standard configuration, or ``profile`` from the config files."""
    try:
        return Aws(boto3.Session(profile_name=profile))
    except ProfileNotFound:
        raise BadInput(f"AWS profile {profile!r} not found in the AWS config files") from None


def error_code(error: BaseException) -> str | None:
    """The AWS error code of a ``ClientError`` (``NoSuchBucket``, ``404``...), else None."""
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def is_not_found(error: BaseException) -> bool:
    """True for a missing key or bucket (``404`` from HEAD requests, ``NoSuch*`` otherwise)."""
    code = error_code(error)
    return code is not None and (code == "404" or code.startswith("NoSuch") or code == "NotFound")


def describe_error(error: BaseException) -> str:
    """A short, actionable reason for an AWS failure."""
    code = error_code(error)
    if code is not None:
        message = str(getattr(error, "response", {}).get("Error", {}).get("Message") or "")
        if code in _DENIED:
            return f"access denied ({code}); the credentials' IAM policy does not allow it"
        if code in _BAD_CREDENTIALS:
            return f"the AWS credentials were rejected ({code}: {message})"
        if code in _THROTTLED:
            return f"throttled by AWS ({code}); retry later"
        return f"{code}: {message}" if message else code
    if isinstance(error, NoCredentialsError):
        return (
            "no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(error, EndpointConnectionError):
        return f"cannot reach the AWS endpoint ({error.kwargs.get('endpoint_url', 'unknown')})"
    return str(error) or type(error).__name__


def is_aws_error(error: BaseException) -> bool:
    """True for any botocore failure: a service error or a client-side one."""
    return isinstance(error, BotoCoreError | ClientError)


@contextmanager
def aws_errors(action: str) -> Iterator[None]:
    """Turn any AWS failure inside the block into one ``CommandFailed`` line naming ``action``."""
    try:
        yield
    except (BotoCoreError, ClientError) as error:
        raise CommandFailed(f"cannot {action}: {describe_error(error)}") from None
