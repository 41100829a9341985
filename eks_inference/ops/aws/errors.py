"""How AWS failures read: one short, actionable line naming the service asked.

A service's message is quoted shortened, with escapes shown escaped and credentials redacted;
a web page that answered instead of AWS (a proxy's, a load balancer's) is summarised as its
HTTP status, never quoted, and never read as AWS's own AccessDenied or NoSuchBucket.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from urllib.parse import urlsplit

from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from botocore.parsers import ResponseParserError  # type: ignore[import-untyped]

from eks_inference.ops.aws.deadlines import TIMEOUT_VARIABLE, request_timeout
from eks_inference.ops.errors import CommandFailed
from eks_inference.ops.text import quote_external, redact_url

_HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_MARKUP = re.compile(r"<\s*(!doctype|html|head|body|title)\b", re.IGNORECASE)

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


def describe_error(error: BaseException, service: str = "AWS") -> str:
    """A short, actionable reason for an AWS failure, on one line.

    ``service`` names the endpoint (``S3``, ``EC2``...) where the error itself cannot: an
    answer that is not an AWS one (a proxy's or load balancer's HTML error page) is summarised
    as its HTTP status and the service asked, never quoted.
    """
    code = error_code(error)
    if from_web_page(error):
        return _http_summary(error, service)
    if code is not None:
        message = one_line(_service_message(error))
        if code in _DENIED:
            return f"access denied ({code}); the credentials' IAM policy does not allow it"
        if code in _BAD_CREDENTIALS:
            return f"the AWS credentials were rejected ({code}: {message})"
        if code in _THROTTLED:
            return f"throttled by AWS ({code}); retry later"
        if code.isdigit():
            # botocore uses the HTTP status as the code when the answer has no AWS error in it
            # (always for HEAD requests, which have no body).
            return _http_summary(error, service)
        return f"{code}: {message}" if message else code
    if isinstance(error, NoCredentialsError):
        return (
            "no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(error, ReadTimeoutError | ConnectTimeoutError):
        verb = "accept a connection" if isinstance(error, ConnectTimeoutError) else "answer"
        return (
            f"{service} at {_origin(_endpoint(error))} did not {verb} within "
            f"{request_timeout():g} s on any attempt; check the network, any proxy and "
            f"AWS_ENDPOINT_URL ({TIMEOUT_VARIABLE} sets the wait)"
        )
    if isinstance(error, ConnectionClosedError):
        # A head cut short (eks_inference.ops.aws.answers) or no answer at all, after retries.
        return (
            f"{service} at {_origin(_endpoint(error))} closed the connection before its answer "
            "was complete, on every attempt; check the network, any proxy and AWS_ENDPOINT_URL"
        )
    if isinstance(error, EndpointConnectionError):
        return f"cannot reach the AWS endpoint ({_endpoint(error)})"
    return one_line(str(error)) or type(error).__name__


def _endpoint(error: BaseException) -> str:
    """The URL a failed request went to, without credentials (``AWS_ENDPOINT_URL`` may hold
    ``user:password@``) or query values."""
    kwargs = getattr(error, "kwargs", None) or {}
    return quote_external(redact_url(str(kwargs.get("endpoint_url", "unknown"))))


def _origin(url: str) -> str:
    """``scheme://host:port`` of a request URL: the endpoint, without the key and query."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else url


def one_line(text: str) -> str:
    """The first line of ``text`` (a service's or botocore's message) made fit to quote:
    shortened, escapes shown escaped, URL credentials and echoed credential headers redacted."""
    lines = text.strip().splitlines()
    return quote_external(lines[0] if lines else "")


def _service_message(error: BaseException) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Message") or "")


def from_web_page(error: BaseException) -> bool:
    """True when a web page (a proxy's, a load balancer's) answered instead of AWS.

    Its status then says nothing about the bucket or the credentials: a 403 or 404 page is
    not AWS's AccessDenied or NoSuchBucket.
    """
    return isinstance(error, ResponseParserError) or _page_title(error) is not None


def _page_title(error: BaseException) -> str | None:
    """The title of the web page that answered instead of AWS ("" if untitled), else None.

    JSON services and unparseable XML quote the page in the error; where botocore replaces an
    unreadable body by the HTTP status (S3), the numeric code says as much as can be known.
    """
    body = _service_message(error) or (str(error) if isinstance(error, ResponseParserError) else "")
    match = _HTML_TITLE.search(body)
    if match:
        return one_line(" ".join(match.group(1).split()))
    return "" if _MARKUP.search(body) else None


def _http_summary(error: BaseException, service: str) -> str:
    """The HTTP status, the service and operation asked, and whether a web page answered.

    A ``ClientError`` carries the status; a body botocore could not parse at all
    (``ResponseParserError``) comes without it, and a page's title usually states it.
    """
    response = getattr(error, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    operation = getattr(error, "operation_name", None)
    asked = f"{service} {operation}" if operation else service
    if isinstance(status, int):
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "(unknown status)"
        summary = f"HTTP {status} {reason} from {asked}"
    else:
        summary = f"{asked} sent an answer that botocore cannot read"
    title = _page_title(error)
    if title is None and not isinstance(error, ResponseParserError):
        return summary
    if title:
        summary += f": an HTML page titled {title!r}"
    elif title == "":
        summary += ": an HTML page"
    return f"{summary}, not an AWS answer; check AWS_ENDPOINT_URL and any proxy"


# Every failure of an AWS call: a service error, a client-side one, or an answer botocore could
# not parse (which is not a BotoCoreError).
_AWS_ERRORS = (BotoCoreError, ClientError, ResponseParserError)


def is_aws_error(error: BaseException) -> bool:
    """True for any failure of an AWS call: a service error, a client-side one, or an
    unreadable answer."""
    return isinstance(error, _AWS_ERRORS)


@contextmanager
def aws_errors(action: str, service: str = "S3") -> Iterator[None]:
    """Turn any AWS failure inside the block into one ``CommandFailed`` line naming ``action``."""
    try:
        yield
    except _AWS_ERRORS as error:
        raise CommandFailed(f"cannot {action}: {describe_error(error, service)}") from None
