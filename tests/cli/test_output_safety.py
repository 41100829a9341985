"""The CLI never prints a secret or a terminal escape it was sent.

Servers on 127.0.0.1 echo what they receive back at the CLI, the way a misconfigured proxy or
a hostile endpoint would: the model endpoint echoes the ``Authorization`` header into its
error bodies, reason phrases and model ids; an "AWS" endpoint, reached through an
``AWS_ENDPOINT_URL`` that carries a password, echoes every request header (the session
token among them) into its error messages. Every answer also carries terminal escapes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape as xml_escape

import pytest
from typer.testing import Result

from tests.helpers.platforms import REFERENCE_PLATFORM

from .conftest import REGION

Cli = Callable[..., Result]
KEY = "sk-platform-0123456789abcdefghijklmnopqrstuvwxyz"
SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLEsessionTOKEN0123456789"
PASSWORD = "endpoint-pa55word"
# Clears the screen and sets the terminal's title: what a hostile answer would try.
HOSTILE = "\x1b[2J\x1b]0;owned\x07\u202e"
# XML cannot carry C0 controls, but it can carry C1 ones: CSI (0x9b) starts the same sequences
# as ESC [ on terminals that honour 8-bit controls.
XML_HOSTILE = "\x9b2J\u202e"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e")


def _echo(headers: Any) -> str:
    """Every request header, as a server that echoes the request would write them; the
    credentials first, so that no shortening of the message can cut them off."""
    first = ("Authorization", "X-Amz-Security-Token")
    items = sorted(headers.items(), key=lambda item: item[0] not in first)
    return "; ".join(f"{name}: {value}" for name, value in items)


class _ModelsEcho(BaseHTTPRequestHandler):
    """``/<route>/v1/models``: each route answers with the request's headers in another place."""

    def do_GET(self) -> None:
        route = self.path.split("/")[1]
        echoed = f"{HOSTILE}{_echo(self.headers)}"
        authorization = self.headers.get("Authorization", "")
        if route == "ok":
            self._send(
                200,
                json.dumps(
                    {
                        "object": "list",
                        "data": [
                            {"id": f"{HOSTILE}{authorization}", "owned_by": echoed},
                            {"id": "mistralai/Mistral-7B-Instruct-v0.1", "owned_by": "vllm"},
                        ],
                    }
                ),
            )
        elif route == "refused":
            self._send(401, json.dumps({"error": {"message": echoed, "code": authorization}}))
        elif route == "failed":
            self._send(500, echoed + "\n" + "x" * 5000, "text/plain")
        elif route == "reason":
            # A status line is Latin-1: the escapes that fit in it.
            self._send(503, "{}", reason=f"\x1b[2J\x07Unavailable for {authorization}")
        else:
            self._send(200, f"<html>{echoed}</html>", "text/html")

    def _send(
        self,
        status: int,
        body: str,
        content_type: str = "application/json",
        reason: str | None = None,
    ) -> None:
        data = body.encode()
        self.send_response(status, reason)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


class _AwsEcho(BaseHTTPRequestHandler):
    """Any AWS call, answered with an error whose message is the request's headers, in the
    protocol the caller speaks: JSON (Service Quotas), EC2's query XML, or S3's REST XML.
    ``HEAD`` (which can carry no message) and ``PUT`` (an upload's first write) succeed, so
    that the commands go on to the calls whose errors are quoted."""

    def _answer(self) -> None:
        if self.command in ("HEAD", "PUT"):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            # What every S3 success carries, so that the commands take it for one.
            self.send_header("x-amz-request-id", "echo")
            self.send_header("ETag", '"0"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        message = f"{XML_HOSTILE}{_echo(self.headers)}"
        if self.headers.get("X-Amz-Target"):
            content_type = "application/x-amz-json-1.1"
            data = json.dumps(
                {"__type": "EchoException", "message": f"{HOSTILE}{_echo(self.headers)}"}
            ).encode()
        elif body.startswith(b"Action="):
            content_type = "text/xml"
            data = (
                "<Response><Errors><Error><Code>EchoError</Code>"
                f"<Message>{xml_escape(message)}</Message></Error></Errors>"
                "<RequestID>echo</RequestID></Response>"
            ).encode()
        else:
            content_type = "application/xml"
            data = (
                "<Error><Code>EchoError</Code>"
                f"<Message>{xml_escape(message)}</Message><RequestId>echo</RequestId></Error>"
            ).encode()
        self.send_response(400)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_HEAD(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def models_port() -> Iterator[int]:
    yield from _serve(_ModelsEcho)


@pytest.fixture(scope="module")
def aws_port() -> Iterator[int]:
    yield from _serve(_AwsEcho)


@pytest.fixture
def secrets_in_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws_port: int) -> None:
    """The API key, a session token, and an AWS endpoint URL with a password, all set."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://admin:{PASSWORD}@127.0.0.1:{aws_port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAECHOTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "echo-test-secret-access-key")
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("EKS_INFERENCE_AWS_TIMEOUT", "5")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("COLUMNS", "400")


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    (directory / "model.safetensors").write_bytes(b"weights")
    return directory


def _assert_safe(result: Result) -> str:
    """The command ended without a traceback and printed no secret and no raw escape."""
    output = result.stdout + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert "Traceback" not in output
    for secret in (KEY, SESSION_TOKEN, PASSWORD):
        assert secret not in output, output
    for control in RAW_CONTROLS:
        assert control not in output, output
    return output


# -- every command that talks to a server or prints an error ----------------------------------

COMMANDS: dict[str, Callable[[int, Path], list[str]]] = {
    "models: the ids and owners echo the key": lambda port, _: [
        "models",
        "--url",
        f"http://127.0.0.1:{port}/ok/v1",
    ],
    "models --json: the ids and owners echo the key": lambda port, _: [
        "models",
        "--url",
        f"http://127.0.0.1:{port}/ok/v1",
        "--json",
    ],
    "models: a 401 body echoes the key": lambda port, _: [
        "models",
        "--url",
        f"http://127.0.0.1:{port}/refused/v1",
    ],
    "models: a 500 text body echoes the key": lambda port, _: [
        "models",
        "--url",
        f"http://127.0.0.1:{port}/failed/v1",
    ],
    "models: the reason phrase echoes the key": lambda port, _: [
        "models",
        "--url",
        f"http://127.0.0.1:{port}/reason/v1",
    ],
    "models: an HTML page echoes the key": lambda port, _: [
        "models",
        "--url",
        f"http://127.0.0.1:{port}/html/v1",
    ],
    "models: credentials in --url": lambda port, _: [
        "models",
        "--url",
        f"http://admin:{PASSWORD}@127.0.0.1:{port}/ok/v1",
    ],
    "models: credentials in a malformed --url": lambda port, _: [
        "models",
        "--url",
        f"http://admin:{PASSWORD}@127.0.0.1:99999/ok/v1",
    ],
    "upload: the AWS errors echo the session token": lambda _, model: [
        "upload",
        str(model),
        "s3://eks-inference-echo/models/m/",
    ],
    "preflight: the AWS errors echo the session token": lambda _, model: [
        "preflight",
        "--platform",
        str(REFERENCE_PLATFORM),
    ],
    "plan: an error": lambda _, model: ["plan", "--platform", str(model / "missing.yaml")],
    "manifests: an error": lambda _, model: [
        "manifests",
        "--out",
        str(model / "out"),
        "--platform",
        str(model / "missing.yaml"),
    ],
}


@pytest.mark.usefixtures("secrets_in_env")
@pytest.mark.parametrize("case", list(COMMANDS))
def test_no_command_prints_the_key_a_token_or_an_escape(
    cli: Cli, models_port: int, model_dir: Path, case: str
) -> None:
    result = cli(*COMMANDS[case](models_port, model_dir))
    _assert_safe(result)


# -- one test per way a secret or an escape used to get out -------------------------------------


@pytest.mark.usefixtures("secrets_in_env")
def test_an_error_body_echoing_the_key_is_summarised_with_the_key_redacted(
    cli: Cli, models_port: int
) -> None:
    result = cli("models", "--url", f"http://127.0.0.1:{models_port}/refused/v1")
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert "the API key was refused" in line
    assert "Authorization: ***" in line
    assert "\\x1b[2J" in line
    _assert_safe(result)


@pytest.mark.usefixtures("secrets_in_env")
def test_a_long_error_body_is_bounded_to_one_short_line(cli: Cli, models_port: int) -> None:
    result = cli("models", "--url", f"http://127.0.0.1:{models_port}/failed/v1")
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert "500 Internal Server Error" in line
    assert line.endswith("...")
    assert len(line) < 400
    _assert_safe(result)


@pytest.mark.usefixtures("secrets_in_env")
def test_model_ids_echoing_the_key_are_printed_redacted_and_escaped(
    cli: Cli, models_port: int
) -> None:
    result = cli("models", "--url", f"http://127.0.0.1:{models_port}/ok/v1", "--json")
    assert result.exit_code == 0, result.stderr
    first, second = json.loads(result.stdout)
    assert first["id"] == "\\x1b[2J\\x1b]0;owned\\x07\\u202eBearer ***"
    assert second["id"] == "mistralai/Mistral-7B-Instruct-v0.1"
    _assert_safe(result)


@pytest.mark.parametrize(
    "url",
    [
        f"http://admin:{PASSWORD}@models.example.com/v1",
        f"http://admin:{PASSWORD}@models.example.com:99999/v1",
        f"ftp://admin:{PASSWORD}@models.example.com/v1",
        f"http://models.example.com/v1?token={PASSWORD}",
    ],
)
def test_a_refused_url_is_quoted_without_its_credentials(cli: Cli, url: str) -> None:
    result = cli("models", "--url", url, "--no-api-key")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "models.example.com" in line
    assert PASSWORD not in line


@pytest.mark.parametrize("command", ["upload", "preflight"])
def test_an_aws_endpoint_url_with_credentials_is_printed_without_them(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    model_dir: Path,
    silent_endpoint: str,
    command: str,
) -> None:
    """Nothing listens on the port: botocore's error names the endpoint URL it could not reach."""
    host = silent_endpoint.removeprefix("http://")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://admin:{PASSWORD}@{host.split(':')[0]}:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAECHOTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "echo-test-secret-access-key")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("COLUMNS", "400")
    args = (
        ["upload", str(model_dir), "s3://eks-inference-echo/models/m/"]
        if command == "upload"
        else ["preflight", "--platform", str(REFERENCE_PLATFORM)]
    )
    result = cli(*args)
    output = result.stdout + result.stderr
    assert result.exit_code == 1, output
    assert "http://127.0.0.1:9" in output
    assert PASSWORD not in output
    assert "Traceback" not in output


def test_an_s3_key_with_escapes_is_shown_escaped_in_preflight(
    cli: Cli, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest in the bucket (written by anyone with access) names a hostile key."""
    from eks_inference.cli.inputs import load_platform

    monkeypatch.setenv("COLUMNS", "400")
    platform = load_platform(REFERENCE_PLATFORM)
    bucket = platform.model_bucket_name
    prefix = platform.deployments[0].weights.prefix
    s3.create_bucket(Bucket=bucket)
    manifest = {
        "format": 1,
        "kind": "weights",
        "created": datetime.now(UTC).isoformat(),
        "files": [{"key": f"config{HOSTILE}.json", "size": 2, "sha256": "0" * 64}],
    }
    s3.put_object(Bucket=bucket, Key=f"{prefix}_manifest.json", Body=json.dumps(manifest))
    result = cli("preflight", "--platform", REFERENCE_PLATFORM)
    output = result.stdout + result.stderr
    assert "config\\x1b[2J\\x1b]0;owned\\x07\\u202e.json" in output, output
    for control in RAW_CONTROLS:
        assert control not in output


def test_an_escape_in_a_bad_input_message_is_shown_escaped(cli: Cli) -> None:
    """The one error printer escapes what a message quotes as given."""
    result = cli(
        "preflight", "--platform", REFERENCE_PLATFORM, "--availability-zones", f"us{HOSTILE}"
    )
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "\\x1b[2J" in line
    for control in RAW_CONTROLS:
        assert control not in line
