"""Fixtures for the CLI tests: a local S3/EC2 emulator, recorded AWS calls, a CLI runner.

The emulator is moto's server, started once per test process on a free port of 127.0.0.1; the
CLI reaches it only through the standard ``AWS_ENDPOINT_URL`` setting, exactly as it would
reach AWS. Its state is reset before each test that uses it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from typer.testing import CliRunner, Result

from eks_inference.cli.main import app
from eks_inference.ops.aws import clients as aws_clients
from eks_inference.ops.upload.lease import LOCK_SUFFIX
from tests.helpers.raw_servers import RawServers

REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _moto_server_command() -> list[str]:
    # The console script next to this interpreter (the project's virtualenv), else on PATH.
    beside = Path(sys.executable).with_name("moto_server")
    found = str(beside) if beside.exists() else shutil.which("moto_server")
    if found is None:
        pytest.fail("moto_server is not installed; run `make setup-dev`")
    return [found]


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """Start ``moto_server`` on 127.0.0.1 for the test session and yield its URL."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [*_moto_server_command(), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError):
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto_server did not start on {endpoint}")
                time.sleep(0.1)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def aws_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Point the standard AWS configuration at a freshly reset emulator; yield its URL."""
    request = urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    # No developer's own AWS files or instance metadata may leak into a test.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return moto_endpoint


@pytest.fixture
def s3(aws_env: str) -> Any:
    """A plain S3 client on the emulator, for arranging and inspecting buckets."""
    return boto3.client("s3", region_name=REGION)


@dataclass
class ApiCalls:
    """AWS calls the CLI made, in order, and an optional failure to inject into them.

    ``fail`` is called before each call with the operation name and its parameters; whatever
    it raises makes that call fail, as a network or service error would.
    """

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    fail: Callable[[str, dict[str, Any]], None] | None = None
    clients: dict[str, Any] = field(default_factory=dict)

    def record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, dict(params)))
        if self.fail is not None:
            self.fail(model.name, params)

    def count(self, operation: str) -> int:
        return sum(1 for name, _ in self.calls if name == operation)

    def keys(self, *operations: str) -> list[str]:
        return [p["Key"] for name, p in self.calls if name in operations and "Key" in p]

    def data_keys(self, *operations: str) -> list[str]:
        """:meth:`keys` without the upload lease's lock object, which every upload writes."""
        return [k for k in self.keys(*operations) if not k.endswith(LOCK_SUFFIX)]

    def clear(self) -> None:
        self.calls.clear()


class _RecordingAws(aws_clients.Aws):
    def __init__(self, session: Any, calls: ApiCalls) -> None:
        super().__init__(session)
        self._calls = calls

    def client(
        self, service: str, region: str | None = None, max_connections: int | None = None
    ) -> Any:
        return self._calls.clients.get(service) or super().client(service, region, max_connections)


@pytest.fixture
def api_calls(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> ApiCalls:
    """Record every AWS call the CLI makes; ``clients`` replaces a service's client."""
    calls = ApiCalls()
    real_connect = aws_clients.connect

    def connect(profile: str | None = None) -> aws_clients.Aws:
        session = real_connect(profile).session
        # Registered on the session before any client exists, so every client inherits it.
        session.events.register("before-parameter-build.*.*", calls.record)
        return _RecordingAws(session, calls)

    monkeypatch.setattr(aws_clients, "connect", connect)
    return calls


@pytest.fixture
def cli() -> Callable[..., Result]:
    """Run the CLI in-process; output is not a terminal, as in CI."""
    runner = CliRunner()

    def invoke(*args: str | Path) -> Result:
        return runner.invoke(app, [str(a) for a in args])

    return invoke


@pytest.fixture
def raw_servers() -> Iterator[RawServers]:
    """Servers on 127.0.0.1 answering with a function each, closed after the test."""
    servers = RawServers()
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture
def silent_endpoint(raw_servers: RawServers) -> str:
    """A server on 127.0.0.1 that accepts every connection and never sends a byte."""

    def hold(connection: socket.socket) -> None:
        raw_servers.stop.wait()  # the connection stays open, silent, until the test ends

    return raw_servers.start(hold)


DRIP_INTERVAL_S = 0.2


@pytest.fixture
def drip_endpoint(raw_servers: RawServers) -> str:
    """A server on 127.0.0.1 that answers every request one byte per :data:`DRIP_INTERVAL_S`.

    Each byte comes well within any read timeout, so only a total deadline ends the request:
    a status line, then a header that never ends.
    """

    def drip(connection: socket.socket) -> None:
        connection.recv(65536)
        for byte in b"HTTP/1.1 200 OK\r\nX-Drip: ":
            connection.sendall(bytes([byte]))
            time.sleep(DRIP_INTERVAL_S)
        while not raw_servers.stop.wait(DRIP_INTERVAL_S):
            connection.sendall(b"x")

    return raw_servers.start(drip)


# The model directory the upload tests send, and where: files of three 5 MiB parts, one part
# and a small one, in a subdirectory too (as Mistral's ``original/`` consolidated weights).
BUCKET = "eks-inference-test-models"
PREFIX = "models/llama-3-8b/"
URI = f"s3://{BUCKET}/{PREFIX}"
MIB = 1024**2
PART_SIZE = ("--part-size", "5")
BIG = "model-00001-of-00002.safetensors"
SMALL = "model-00002-of-00002.safetensors"


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A model directory: ``config.json``, :data:`BIG` (11 MiB: three parts), :data:`SMALL`
    and ``original/consolidated.safetensors``."""
    root = tmp_path / "llama"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (root / BIG).write_bytes(os.urandom(11 * MIB))
    (root / SMALL).write_bytes(os.urandom(300 * 1024))
    (root / "original").mkdir()
    (root / "original" / "consolidated.safetensors").write_bytes(os.urandom(64 * 1024))
    return root


@pytest.fixture
def bucket(s3: Any) -> str:
    """:data:`BUCKET`, created in the S3 emulator."""
    s3.create_bucket(Bucket=BUCKET)
    return BUCKET


def upload(cli: Callable[..., Result], root: Path, *args: str) -> Result:
    """``eks-inference upload ROOT URI`` in 5 MiB parts, with ``args``."""
    return cli("upload", root, URI, *PART_SIZE, *args)
