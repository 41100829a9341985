"""An answer cut short, or a success without the fields it carries, is a failure.

Servers on 127.0.0.1 that answer ``200`` with an empty body, cut the answer in the middle of
its headers, or drip it a byte a second: ``upload`` and ``preflight`` fail within the
configured deadline with one line, never a traceback, and nothing counts as written. A proxy
in front of the S3 emulator empties the answer of one operation at a time (the lease's write,
an object's put, a multipart part or completion, a head, a listing), so every S3 call of an
upload is shown to refuse an empty success, not only the first one made.
"""

from __future__ import annotations

import http.client
import http.server
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import Result

from eks_inference.ops.aws.deadlines import TIMEOUT_VARIABLE
from eks_inference.ops.upload.lease import LOCK_SUFFIX
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO
from tests.helpers.raw_servers import Answer, RawServers

from .conftest import BUCKET, PREFIX, URI, upload

Cli = Callable[..., Result]

EMPTY_SUCCESS = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
# S3's request id and an ETag arrive before the cut, so only the unfinished head gives the
# answer away.
CUT_HEAD = b'HTTP/1.1 200 OK\r\nx-amz-request-id: cut\r\nETag: "0"\r\nContent-Ty'
EMPTY_SUCCESS_WITH_ID = b"HTTP/1.1 200 OK\r\nx-amz-request-id: s\r\nContent-Length: 0\r\n\r\n"
# 13 bytes of the 500 announced, then the end of the connection.
SHORT_BODY = (
    b'HTTP/1.1 200 OK\r\nx-amz-request-id: short\r\nETag: "0"\r\nContent-Length: 500\r\n\r\n'
    b"<?xml version"
)
DRIPPED_HEAD = b"HTTP/1.1 200 OK\r\nx-amz-request-id: drip\r\n"
DRIP_INTERVAL_S = 1.0


def _read_request(connection: socket.socket) -> bytes:
    """Read a request's head (and whatever came with it), enough to answer it; empty when
    the client closed the connection instead."""
    connection.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return b""
        data += chunk
    return data


def _empty_success(connection: socket.socket) -> None:
    # Keep-alive: the client may send its next request on the same connection.
    while _read_request(connection):
        connection.sendall(EMPTY_SUCCESS)


def _cut_head(connection: socket.socket) -> None:
    _read_request(connection)
    connection.sendall(CUT_HEAD)


def _short_body(connection: socket.socket) -> None:
    # Bucket checks pass; every other answer ends long before its Content-Length.
    while request := _read_request(connection):
        if request.startswith(b"HEAD "):
            connection.sendall(EMPTY_SUCCESS_WITH_ID)
            continue
        connection.sendall(SHORT_BODY)
        return


def _drip(stop: threading.Event) -> Answer:
    def answer(connection: socket.socket) -> None:
        _read_request(connection)
        connection.sendall(DRIPPED_HEAD)
        for byte in b'ETag: "0"\r\nContent-Type: application/xml\r\n' * 100:
            if stop.wait(DRIP_INTERVAL_S):
                return
            connection.sendall(bytes([byte]))

    return answer


def _run(*args: str | Path, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "eks_inference", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        cwd=REPO,
    )
    return completed, time.monotonic() - started


@pytest.fixture
def one_attempt(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One attempt per request and a 1.5 s wait per byte (each drip byte comes within it)."""
    monkeypatch.setenv(TIMEOUT_VARIABLE, "1.5")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")


# Whole-endpoint misbehaviour: upload.


def test_an_empty_success_fails_the_bucket_check(
    one_attempt: None,
    raw_servers: RawServers,
    model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", raw_servers.start(_empty_success))
    completed, elapsed = _run("upload", model_dir, URI)
    line = one_line_error(completed, 1)
    assert line == (
        f"error: cannot read bucket {BUCKET}: S3 HeadBucket answered HTTP 200 without a request "
        "id (x-amz-request-id), which every such answer carries: not a complete S3 answer; "
        "check AWS_ENDPOINT_URL and any proxy"
    )
    assert elapsed < 15


def test_an_answer_cut_in_its_headers_fails_the_bucket_check(
    one_attempt: None,
    raw_servers: RawServers,
    model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = raw_servers.start(_cut_head)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    completed, elapsed = _run("upload", model_dir, URI)
    line = one_line_error(completed, 1)
    assert line == (
        f"error: cannot read bucket {BUCKET}: S3 at {endpoint} closed the connection before "
        "its answer was complete, on every attempt; check the network, any proxy and "
        "AWS_ENDPOINT_URL"
    )
    assert elapsed < 15


def test_a_body_shorter_than_its_length_fails_the_lease(
    one_attempt: None,
    raw_servers: RawServers,
    model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = raw_servers.start(_short_body)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    completed, elapsed = _run("upload", model_dir, URI)
    line = one_line_error(completed, 1)
    assert line == (
        f"error: cannot take the upload lease s3://{BUCKET}/{PREFIX.removesuffix('/')}"
        f"{LOCK_SUFFIX}: S3 at {endpoint} closed the connection before its answer was "
        "complete, on every attempt; check the network, any proxy and AWS_ENDPOINT_URL"
    )
    assert elapsed < 15


def test_an_answer_dripped_a_byte_a_second_is_cut_at_the_request_deadline(
    one_attempt: None,
    raw_servers: RawServers,
    model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = raw_servers.start(_drip(raw_servers.stop))
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    completed, elapsed = _run("upload", model_dir, URI)
    line = one_line_error(completed, 1)
    origin = endpoint.removeprefix("http://")
    # The watchdog cuts the head at twice the 1.5 s wait; the cut head is not a success.
    assert line.startswith(f"error: stopped: a request to {origin} (HEAD) outlived its deadline")
    assert "of 3 s plus 1 s per MiB sent" in line
    # One request of 3 s and the interpreter's start.
    assert elapsed < 15


# Whole-endpoint misbehaviour: preflight.


def test_preflight_fails_the_checks_an_empty_success_would_pass(
    one_attempt: None,
    raw_servers: RawServers,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", raw_servers.start(_empty_success))
    monkeypatch.setenv("COLUMNS", "400")
    completed, elapsed = _run("preflight", "--platform", REFERENCE_PLATFORM)
    line = one_line_error(completed, 1)
    assert re.fullmatch(r"error: (\d+) of \1 preflight checks failed", line), line
    text = " ".join(completed.stdout.split())
    assert "S3 HeadBucket answered HTTP 200 without a request id (x-amz-request-id)" in text
    assert "EC2 sent an answer that botocore cannot read" in text
    assert "Service Quotas answered without a quota value" in text
    assert "PASS" not in text
    assert elapsed < 20


def test_preflight_fails_the_bucket_check_on_an_answer_cut_in_its_headers(
    one_attempt: None,
    raw_servers: RawServers,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = raw_servers.start(_cut_head)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("COLUMNS", "400")
    completed, _ = _run("preflight", "--platform", REFERENCE_PLATFORM)
    one_line_error(completed, 1)
    text = " ".join(completed.stdout.split())
    assert f"S3 at {endpoint} closed the connection before its answer was complete" in text
    assert "PASS" not in text


# One operation at a time, in front of the S3 emulator.


def _operation(method: str, path: str, query: dict[str, list[str]]) -> str:
    """The S3 operation of a path-style request to the emulator."""
    key = path.split("/", 2)[2] if path.count("/") >= 2 else ""
    if method == "HEAD":
        return "HeadObject" if key else "HeadBucket"
    if method == "GET":
        if "uploads" in query:
            return "ListMultipartUploads"
        return "GetObject" if key else "ListObjectsV2"
    if method == "PUT":
        if "partNumber" in query:
            return "UploadPart"
        return "PutObject (lease)" if key.endswith(LOCK_SUFFIX) else "PutObject"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        return "CompleteMultipartUpload" if "uploadId" in query else "DeleteObjects"
    return "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"


@pytest.fixture
def emptying_proxy(aws_env: str) -> Iterator[tuple[str, list[str], set[str]]]:
    """A proxy on 127.0.0.1 in front of the emulator; requests of the operations put in its
    set get an empty ``200`` (with S3's request id) instead of the emulator's answer. Yields
    its URL, the operations it saw in order, and the set."""
    upstream = urlsplit(aws_env)
    seen: list[str] = []
    emptied: set[str] = set()

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            operation = _operation(self.command, parts.path, parse_qs(parts.query, True))
            seen.append(operation)
            if operation in emptied:
                self.send_response(200)
                self.send_header("x-amz-request-id", "emptied")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            self.send_response(response.status)
            for name, value in response.getheaders():
                if name.lower() not in {"content-length", "transfer-encoding", "connection"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            connection.close()

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = forward  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads the CLI's output."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen, emptied
    finally:
        server.shutdown()
        server.server_close()


def _names(s3: Any) -> list[str]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX).get("Contents", [])
    return [item["Key"].removeprefix(PREFIX) for item in listed]


@pytest.mark.parametrize(
    ("operation", "missing"),
    [
        ("PutObject (lease)", "ETag"),
        ("ListObjectsV2", "IsTruncated"),
        ("ListMultipartUploads", "IsTruncated"),
        ("PutObject", "ETag"),
        ("CreateMultipartUpload", "UploadId"),
        ("UploadPart", "ETag"),
        ("CompleteMultipartUpload", "ETag"),
        ("HeadObject", "ETag"),
        ("GetObject", "ETag, LastModified"),
    ],
)
def test_every_s3_call_of_an_upload_refuses_an_empty_success(
    cli: Cli,
    s3: Any,
    bucket: str,
    model_dir: Path,
    emptying_proxy: tuple[str, list[str], set[str]],
    monkeypatch: pytest.MonkeyPatch,
    operation: str,
    missing: str,
) -> None:
    endpoint, seen, emptied = emptying_proxy
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    emptied.add(operation)
    result = upload(cli, model_dir)
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.output
    assert operation in seen
    name = operation.removesuffix(" (lease)")
    assert f"S3 {name} answered HTTP 200 without {missing}, which every such answer" in errors[0]
    # Nothing looks complete: no manifest, and no lease left behind by the run.
    assert "_manifest.json" not in _names(s3)
    locks = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX.removesuffix("/")).get("Contents", [])
    assert [item["Key"] for item in locks if item["Key"].endswith(LOCK_SUFFIX)] == []
