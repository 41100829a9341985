"""What makes an AWS answer a success: a whole head, and the fields every success carries.

botocore takes any 2xx status for a success and parses whatever came with it. An answer cut
short is then a success too: Python's HTTP client ends the head at the end of the stream as
it would at the blank line, so a connection closed in the middle of the headers (by the
endpoint, a proxy, or the deadline watchdog of :mod:`~eks_inference.ops.aws.deadlines`)
reads as a ``200`` with no headers past the cut and no body, and a ``200`` with an empty body
parses as an answer with no fields. A bucket check then passes and a write "succeeds" against
an endpoint that stored nothing, and the first missing field is a ``KeyError`` far from the
call. Two checks close that:

* :class:`CompleteHeadConnection` fails a response whose status line or headers end without
  their line end, or whose body ends before its ``Content-Length``, as a dropped connection
  (which botocore retries);
* :func:`require_complete_answers` fails a success without what every success of its
  operation carries: S3's request id on every S3 answer (``x-amz-request-id``, present on
  every answer S3 sends, errors included), and the fields of :data:`REQUIRED_FIELDS`, with
  one line naming the service, the operation and what is missing.
"""

from __future__ import annotations

import functools
import http.client
from typing import Any

from botocore.awsrequest import AWSHTTPResponse  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError  # type: ignore[import-untyped]

# The fields of the parsed answer each operation the commands call always holds on success:
# what the code reads from it, and what S3 and EC2 send even when there is nothing to list
# (an empty list element, ``IsTruncated`` false). Keyed by botocore's service name.
REQUIRED_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("s3", "HeadObject"): ("ETag", "ContentLength"),
    ("s3", "GetObject"): ("ETag", "LastModified", "Body"),
    ("s3", "PutObject"): ("ETag",),
    ("s3", "CreateMultipartUpload"): ("UploadId",),
    ("s3", "UploadPart"): ("ETag",),
    ("s3", "CompleteMultipartUpload"): ("ETag",),
    ("s3", "ListObjectsV2"): ("IsTruncated",),
    ("s3", "ListMultipartUploads"): ("IsTruncated",),
    ("ec2", "DescribeAvailabilityZones"): ("AvailabilityZones",),
    ("ec2", "DescribeInstanceTypeOfferings"): ("InstanceTypeOfferings",),
    ("ec2", "DescribeInstances"): ("Reservations",),
    ("ec2", "DescribeVolumes"): ("Volumes",),
    ("ec2", "DescribeNetworkInterfaces"): ("NetworkInterfaces",),
    ("ec2", "DescribeSecurityGroups"): ("SecurityGroups",),
    ("elbv2", "DescribeLoadBalancers"): ("LoadBalancers",),
    ("elbv2", "DescribeTargetGroups"): ("TargetGroups",),
    ("elbv2", "DescribeTags"): ("TagDescriptions",),
    ("fsx", "DescribeFileSystems"): ("FileSystems",),
}
# S3's request id: botocore reads it from ``x-amz-request-id`` (or ``x-amzn-requestid``).
_S3_REQUEST_ID = "a request id (x-amz-request-id)"


class IncompleteAnswerError(BotoCoreError):  # type: ignore[misc]
    """A success status without what every success of the operation carries."""

    fmt = (
        "{service} {operation} answered HTTP {status} without {missing}, which every such "
        "answer carries: not a complete {service} answer; check AWS_ENDPOINT_URL and any proxy"
    )


class HeadCutShortError(http.client.HTTPException):
    """The status line or the headers of a response ended without their line end."""


class _HeadReader:
    """A response's file while its head is read: notes a line cut short by the end of input.

    Every line of a head ends in a line feed, the blank line closing the headers included; a
    line without one came from a stream that ended.
    """

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.cut_short = False

    def readline(self, limit: int = -1) -> bytes:
        line: bytes = self.raw.readline(limit)
        if not line.endswith(b"\n"):
            self.cut_short = True
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class CompleteHeadResponse(AWSHTTPResponse):  # type: ignore[misc]
    """botocore's response, refusing a head that ended with the stream instead of its blank
    line, and a body shorter than its length."""

    fp: Any

    def __init__(self, *args: Any, status_tuple: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, status_tuple=status_tuple, **kwargs)

    def begin(self) -> None:
        if self.headers is not None:
            return
        reader = _HeadReader(self.fp)
        self.fp = reader
        try:
            super().begin()
        finally:
            if self.fp is reader:
                self.fp = reader.raw
        if reader.cut_short:
            raise HeadCutShortError("the answer ended in the middle of its status line or headers")

    def read(self, amt: int | None = None) -> bytes:
        """Read the body; a stream that ends before the announced ``Content-Length`` is an
        incomplete answer, not a shorter body (botocore turns urllib3's own check off)."""
        data: bytes = super().read(amt)
        if not data and amt and self.length:
            raise http.client.IncompleteRead(b"", self.length)
        return data


class CompleteHeadConnection:
    """Mixin for botocore's connections: every response is a :class:`CompleteHeadResponse`.

    botocore reads the status line itself after an ``Expect: 100-continue`` request and
    builds the response from it with its own class; that one is swapped for ours too.
    """

    response_class: Any = CompleteHeadResponse

    def _handle_expect_response(self, message_body: Any) -> None:
        super()._handle_expect_response(message_body)  # type: ignore[misc]
        built = self.response_class
        if isinstance(built, functools.partial) and built.func is AWSHTTPResponse:
            self.response_class = functools.partial(CompleteHeadResponse, **built.keywords)


def _missing(service: str, operation: str, parsed: dict[str, Any]) -> list[str]:
    """What a success of ``operation`` lacks, in words; empty when it is complete."""
    missing = []
    if service == "s3" and not parsed.get("ResponseMetadata", {}).get("RequestId"):
        missing.append(_S3_REQUEST_ID)
    missing += [f for f in REQUIRED_FIELDS.get((service, operation), ()) if f not in parsed]
    return missing


def require_complete_answers(client: Any) -> None:
    """Make every success of ``client`` without its required fields an
    :class:`IncompleteAnswerError` (an AWS error, reported in one line as any other)."""

    def check(http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        status = getattr(http_response, "status_code", 0)
        if not 200 <= status < 300:
            return
        service = model.service_model.service_name
        missing = _missing(service, model.name, parsed)
        if missing:
            raise IncompleteAnswerError(
                service=model.service_model.service_id,
                operation=model.name,
                status=status,
                missing=", ".join(missing),
            )

    client.meta.events.register("after-call", check)
