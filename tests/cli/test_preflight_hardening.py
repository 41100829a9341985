"""``preflight`` when something other than AWS answers, or nothing does (issue 13, items 4-5).

A proxy, load balancer or captive portal answers with an HTML page: preflight summarises the
HTTP status and the service in the row's detail and never prints the page. An endpoint that
accepts connections and never answers fails every row in bounded time.
"""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from typer.testing import Result

from eks_inference.ops.aws.deadlines import TIMEOUT_VARIABLE
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO

Cli = Callable[..., Result]
PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n"
    b"<body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body>\n"
    b"</html>\n"
)
_MARKUP = re.compile(r"<\s*(!doctype|html|head|title|body|center|h1)\b", re.IGNORECASE)


@pytest.fixture(autouse=True)
def _wide_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Wide enough that no detail cell wraps, so each check is one line to search."""
    monkeypatch.setenv("COLUMNS", "400")


def _page_server(status: int) -> http.server.ThreadingHTTPServer:
    """A server on 127.0.0.1 answering every request with ``status`` and nginx's error page."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(status)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(PAGE)

        # http.server dispatches on these names.
        do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = answer  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads the CLI's output, not the server's."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(params=[502, 200])
def html_endpoint(request: pytest.FixtureRequest) -> Iterator[tuple[int, str]]:
    """The status every request gets, and the URL of the server that gives it."""
    status = int(request.param)
    server = _page_server(status)
    try:
        yield status, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _rows(result: Result) -> str:
    return " ".join(result.stdout.split())


def test_an_html_error_page_is_summarised_never_printed(
    cli: Cli,
    aws_env: str,
    html_endpoint: tuple[int, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    status, endpoint = html_endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    result = cli("preflight", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert not _MARKUP.search(result.output), result.output
    text = _rows(result)
    # EC2 (XML that does not parse) and Service Quotas (JSON that quotes the page) each get a
    # one-line summary naming the service.
    ec2 = "EC2 sent an answer that botocore cannot read: an HTML page titled '502 Bad Gateway'"
    assert ec2 in text
    assert "not an AWS answer; check AWS_ENDPOINT_URL and any proxy" in text
    if status == 502:
        assert "HTTP 502 Bad Gateway from S3 HeadBucket" in text
        assert (
            "HTTP 502 Bad Gateway from Service Quotas GetServiceQuota: an HTML page titled "
            "'502 Bad Gateway', not an AWS answer"
        ) in text
    else:
        # A page with status 200 is no S3 answer (it has no request id) and holds no quota
        # value.
        assert "S3 HeadBucket answered HTTP 200 without a request id (x-amz-request-id)" in text
        assert "Service Quotas answered without a quota value" in text


def test_a_silent_endpoint_fails_every_check_in_bounded_time(
    aws_env: str, silent_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", silent_endpoint)
    monkeypatch.setenv(TIMEOUT_VARIABLE, "0.3")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "eks_inference", "preflight", "--platform", REFERENCE_PLATFORM],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
    )
    elapsed = time.monotonic() - started
    assert completed.returncode == 1, completed.stderr
    text = " ".join(completed.stdout.split())
    for service in ("S3", "EC2", "Service Quotas"):
        assert re.search(
            rf"{service} at {silent_endpoint} did not answer within 0\.3 s on any attempt", text
        ), text
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1
    assert re.fullmatch(r"error: (\d+) of \1 preflight checks failed", lines[0]), lines
    # Five requests of 0.3 s each (bucket, zones, three quotas) and the interpreter's start.
    assert elapsed < 20
