"""``eks-inference models``: the model list of a deployed endpoint, asked of a real HTTP server
on 127.0.0.1 that checks the key the way the model servers do; every failure one line."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import Result

from eks_inference.ops.served_models import MAX_RESPONSE_BYTES, models_endpoint
from eks_inference.specification.platform import PlatformSpec
from tests.cli.conftest import DRIP_INTERVAL_S
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import reference

KEY = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL"
MODELS = {
    "object": "list",
    "data": [
        {
            "id": "mistralai/Mistral-7B-Instruct-v0.1",
            "object": "model",
            "owned_by": "vllm",
            "max_model_len": 8192,
        },
    ],
}

# A deployment serving LoRA adapters: vLLM 0.34.0's /v1/models lists each adapter with its
# base model as "parent" (OpenAIServingModels.show_available_models).
LORA_MODELS = {
    "object": "list",
    "data": [
        {"id": "meta-llama/Meta-Llama-3-8B-Instruct", "object": "model", "owned_by": "vllm"},
        {
            "id": "sql-writer",
            "object": "model",
            "owned_by": "vllm",
            "parent": "meta-llama/Meta-Llama-3-8B-Instruct",
        },
    ],
}

# Deep enough to exhaust Python's recursion limit in a naive parser, small enough to send.
DEEP_JSON = b"[" * 100_000 + b"]" * 100_000
# What the platform's servers answer a missing or wrong key with (the API-key middleware in
# front of every model server, under eks_inference/serve; OpenAI's error shape).
PLATFORM_401 = {
    "error": {
        "message": "a valid API key is required: send Authorization: Bearer <key>",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}


@dataclass
class FakeEndpoint:
    """What the fake load balancer saw, and the base URL of its one deployment."""

    base_url: str
    requests: list[dict[str, str]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    """``/<deployment>/v1/models`` as the platform serves it, plus misbehaving routes."""

    seen: list[dict[str, str]]

    def do_GET(self) -> None:
        self.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        if self.path == "/slow/v1/models":
            time.sleep(2)
        routes: dict[str, Callable[[], None]] = {
            "/mistral/v1/models": self._models,
            "/slow/v1/models": self._models,
            "/text/v1/models": lambda: self._send(200, b"<html>not json</html>", "text/html"),
            "/shape/v1/models": lambda: self._json(200, {"models": ["a"]}),
            "/empty/v1/models": lambda: self._json(200, {"object": "list", "data": []}),
            "/huge/v1/models": lambda: self._send(200, b"x" * (MAX_RESPONSE_BYTES + 10)),
            "/broken/v1/models": lambda: self._json(
                503, {"error": {"message": "no healthy upstream"}}
            ),
            "/moved/v1/models": lambda: self._send(302, b"", headers={"Location": "/x"}),
            "/deep/v1/models": lambda: self._send(200, DEEP_JSON, "application/json"),
            "/deep-error/v1/models": lambda: self._send(500, DEEP_JSON, "application/json"),
            "/platform-401/v1/models": lambda: self._json(401, PLATFORM_401),
            # A path typed with a non-ASCII character arrives percent-encoded (UTF-8).
            "/caf%C3%A9/v1/models": lambda: self._json(200, MODELS),
            "/lora/v1/models": lambda: self._json(200, LORA_MODELS),
        }
        routes.get(self.path, lambda: self._json(404, {"error": "not found"}))()

    def _models(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            self._json(
                401,
                {"error": {"message": "a valid API key is required", "code": "invalid_api_key"}},
            )
            return
        self._json(200, MODELS)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str = "text/plain",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        # The client stops reading an oversized answer, as it should.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads what the server saw from ``seen``."""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    handler = type("Handler", (_Handler,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def endpoint(server: tuple[str, list[dict[str, str]]]) -> FakeEndpoint:
    root, seen = server
    seen.clear()
    return FakeEndpoint(base_url=f"{root}/mistral/v1", requests=seen)


@pytest.fixture
def with_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


# -- the model list --------------------------------------------------------------------------


@pytest.mark.usefixtures("with_key")
def test_lists_the_served_models_with_the_key(
    cli: Callable[..., Result], endpoint: FakeEndpoint
) -> None:
    result = cli("models", "--url", endpoint.base_url)
    assert result.exit_code == 0, result.stderr
    assert "mistralai/Mistral-7B-Instruct-v0.1" in result.stdout
    assert "8,192" in result.stdout
    assert f"{endpoint.base_url}/models: 1 served" in result.stdout
    (request,) = endpoint.requests
    assert request["path"] == "/mistral/v1/models"
    assert request["authorization"] == f"Bearer {KEY}"
    assert request["accept"] == "application/json"


@pytest.mark.usefixtures("with_key")
def test_lists_lora_adapters_with_their_base_model(
    cli: Callable[..., Result], server: tuple[str, list[dict[str, str]]]
) -> None:
    root, _ = server
    result = cli("models", "--url", f"{root}/lora/v1", "--json")
    assert result.exit_code == 0, result.stderr
    listed = {m["id"]: m["parent"] for m in json.loads(result.stdout)}
    assert listed == {
        "meta-llama/Meta-Llama-3-8B-Instruct": None,
        "sql-writer": "meta-llama/Meta-Llama-3-8B-Instruct",
    }
    table = cli("models", "--url", f"{root}/lora/v1")
    assert "adapter of" in table.stdout
    (row,) = [line for line in table.stdout.splitlines() if "sql-writer" in line]
    assert "meta-llama/Meta-Llama-3-8B-Instruct" in row


def test_the_key_comes_from_the_named_variable(
    cli: Callable[..., Result], endpoint: FakeEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATFORM_KEY", KEY)
    result = cli(
        "models", "--url", f"{endpoint.base_url}/", "--api-key-env", "PLATFORM_KEY", "--json"
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [
        {
            "id": "mistralai/Mistral-7B-Instruct-v0.1",
            "owned_by": "vllm",
            "max_model_len": 8192,
            "parent": None,
        }
    ]
    assert KEY not in result.stdout + result.stderr


def test_a_refused_key_is_one_line_naming_the_answer(
    cli: Callable[..., Result], endpoint: FakeEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    line = one_line_error(cli("models", "--url", endpoint.base_url), 1, "401 Unauthorized")
    assert "the API key was refused: a valid API key is required" in line
    assert "wrong" not in line


def test_no_key_against_an_endpoint_that_requires_one(
    cli: Callable[..., Result], endpoint: FakeEndpoint
) -> None:
    line = one_line_error(
        cli("models", "--url", endpoint.base_url, "--no-api-key"), 1, "401 Unauthorized"
    )
    assert "requires an API key" in line
    assert "authorization" not in endpoint.requests[0]


# -- bad input: exit 2 -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ftp://example.com/v1", "must be an http(s) URL with a host"),
        ("example.com/v1", "must be an http(s) URL with a host"),
        ("http://example.com:99999/v1", "is not a URL"),
        ("http://example.com/v1?key=x", "no query, fragment or credentials"),
        ("http://user:pw@example.com/v1", "no query, fragment or credentials"),
    ],
)
def test_malformed_urls(cli: Callable[..., Result], url: str, expected: str) -> None:
    one_line_error(cli("models", "--url", url, "--no-api-key"), 2, expected)


def test_a_missing_key_variable_is_bad_input(
    cli: Callable[..., Result], endpoint: FakeEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    one_line_error(cli("models", "--url", endpoint.base_url), 2, "OPENAI_API_KEY is unset")
    assert endpoint.requests == []


def test_a_key_with_whitespace_is_bad_input(
    cli: Callable[..., Result], endpoint: FakeEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", f"{KEY}\n")
    one_line_error(cli("models", "--url", endpoint.base_url), 2, "whitespace or non-ASCII")


@pytest.mark.parametrize("option", ["--connect-timeout", "--read-timeout"])
def test_timeouts_must_be_positive(cli: Callable[..., Result], option: str) -> None:
    one_line_error(
        cli("models", "--url", "http://127.0.0.1/v1", "--no-api-key", option, "0"), 2, option
    )


# -- failures: exit 1, bounded in time and memory ---------------------------------------------


@pytest.mark.usefixtures("with_key")
@pytest.mark.parametrize(
    ("deployment", "expected"),
    [
        ("text", "did not answer with JSON: '<html>not json</html>'"),
        ("shape", "is not an OpenAI model list"),
        ("empty", "serves no model"),
        ("huge", f"more than {MAX_RESPONSE_BYTES} bytes"),
        ("broken", "503 Service Unavailable: no healthy upstream"),
        ("moved", "302 Found"),
        ("nowhere", "404 Not Found: is --url the deployment's base URL"),
    ],
)
def test_wrong_answers_are_one_line(
    cli: Callable[..., Result], endpoint: FakeEndpoint, deployment: str, expected: str
) -> None:
    url = endpoint.base_url.replace("/mistral/", f"/{deployment}/")
    one_line_error(cli("models", "--url", url), 1, expected)


@pytest.mark.usefixtures("with_key")
def test_a_slow_server_hits_the_read_timeout(
    cli: Callable[..., Result], endpoint: FakeEndpoint
) -> None:
    url = endpoint.base_url.replace("/mistral/", "/slow/")
    started = time.monotonic()
    one_line_error(
        cli("models", "--url", url, "--read-timeout", "0.3"), 1, "sent no response within 0.3 s"
    )
    assert time.monotonic() - started < 1.5


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.usefixtures("with_key")
def test_nothing_listening_is_one_line(cli: Callable[..., Result]) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/mistral/v1"
    one_line_error(cli("models", "--url", url), 1, "could not connect to")


@pytest.mark.usefixtures("with_key")
def test_a_connection_that_never_opens_hits_the_connect_timeout(
    cli: Callable[..., Result],
) -> None:
    # A listener that never accepts: once its queue is full, the kernel drops new handshakes.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        try:
            for _ in range(4):
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex(("127.0.0.1", port))
                fillers.append(filler)
            time.sleep(0.1)
            started = time.monotonic()
            result = cli(
                "models", "--url", f"http://127.0.0.1:{port}/v1", "--connect-timeout", "0.5"
            )
            elapsed = time.monotonic() - started
        finally:
            for filler in fillers:
                filler.close()
    one_line_error(result, 1, "could not connect to")
    assert "within 0.5 s" in result.stderr
    assert elapsed < 2


def test_the_models_path_is_below_the_base_url() -> None:
    assert models_endpoint("https://models.example.com/llama/v1").url == (
        "https://models.example.com/llama/v1/models"
    )
    assert models_endpoint("http://10.0.0.5:8000/v1/").path == "/v1/models"


def test_a_platform_file_exposing_to_the_internet_without_tls_is_refused(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    """What ``cdk synth`` (app.py) and every command reading the file do with it."""
    data = reference()
    data["endpoint"] = {"scheme": "internet-facing", "source_cidrs": ["203.0.113.0/24"]}
    platform = tmp_path / "deployments.yaml"
    platform.write_text(yaml.safe_dump(data))
    with pytest.raises(ValidationError, match=r"endpoint\.certificate_arn"):
        PlatformSpec.from_yaml(platform)
    result = cli("manifests", "--out", tmp_path / "out", "--platform", platform)
    one_line_error(
        result, 2, "endpoint.certificate_arn: an internet-facing endpoint must use HTTPS"
    )
    assert not (tmp_path / "out").exists()


# -- a total deadline, bounded parsing, hosts and paths ------------------------------------------


@pytest.mark.usefixtures("with_key")
def test_a_drip_feeding_server_is_cut_at_the_deadline(
    cli: Callable[..., Result], drip_endpoint: str
) -> None:
    root = drip_endpoint
    # Every read returns within the read timeout; only the deadline can end the exchange.
    read_timeout = 4 * DRIP_INTERVAL_S
    started = time.monotonic()
    result = cli(
        "models",
        "--url",
        f"{root}/mistral/v1",
        "--read-timeout",
        str(read_timeout),
        "--deadline",
        "1.5",
    )
    elapsed = time.monotonic() - started
    one_line_error(result, 1, "did not finish answering within 1.5 s (--deadline)")
    assert 1.5 <= elapsed < 3, elapsed


@pytest.mark.usefixtures("with_key")
@pytest.mark.parametrize(
    ("deployment", "expected"),
    [
        ("deep", "answered JSON nested deeper than 64 levels; that is not a model list"),
        ("deep-error", "answered 500 Internal Server Error: [[[["),
    ],
)
def test_deeply_nested_json_is_one_line_not_a_recursion_error(
    cli: Callable[..., Result], endpoint: FakeEndpoint, deployment: str, expected: str
) -> None:
    url = endpoint.base_url.replace("/mistral/", f"/{deployment}/")
    line = one_line_error(cli("models", "--url", url), 1, expected)
    assert len(line) < 400
    assert "RecursionError" not in line


@pytest.mark.usefixtures("with_key")
def test_the_platform_401_is_one_line_with_its_message_and_code(
    cli: Callable[..., Result], endpoint: FakeEndpoint
) -> None:
    url = endpoint.base_url.replace("/mistral/", "/platform-401/")
    line = one_line_error(cli("models", "--url", url), 1, "401 Unauthorized")
    assert line.endswith(
        "the API key was refused: a valid API key is required: send Authorization: Bearer "
        "<key> (invalid_api_key)"
    ), line


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("exa mple.com", "has whitespace in it"),
        ("models..example.com", "has an empty label"),
        (".example.com", "has an empty label"),
        (f"{'a' * 70}.example.com", "has a label of 70 characters; DNS allows 63"),
        ("models!.example.com", "that is not letters, digits and inner hyphens"),
        ("-models.example.com", "that is not letters, digits and inner hyphens"),
        (".".join(["a" * 60] * 5), "is 304 characters long; DNS allows 253"),
    ],
)
def test_an_invalid_host_is_bad_input(cli: Callable[..., Result], host: str, expected: str) -> None:
    one_line_error(cli("models", "--url", f"http://{host}/v1", "--no-api-key"), 2, expected)


def test_a_valid_host_goes_on_the_wire_in_ascii() -> None:
    assert models_endpoint("http://Models.Example.com./v1").host == "models.example.com."
    assert models_endpoint("http://bücher.example/v1").host == "xn--bcher-kva.example"
    assert models_endpoint("http://internal_lb.corp:8080/v1").port == 8080
    ipv6 = models_endpoint("http://[::1]:8000/v1")
    assert ipv6.host == "::1"
    assert ipv6.url == "http://[::1]:8000/v1/models"


@pytest.mark.usefixtures("with_key")
def test_a_non_ascii_path_is_sent_percent_encoded(
    cli: Callable[..., Result], endpoint: FakeEndpoint
) -> None:
    url = endpoint.base_url.replace("/mistral/", "/café/")
    result = cli("models", "--url", url)
    assert result.exit_code == 0, result.stderr
    assert "mistralai/Mistral-7B-Instruct-v0.1" in result.stdout
    assert [r["path"] for r in endpoint.requests] == ["/caf%C3%A9/v1/models"]
