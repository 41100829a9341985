"""The platform's one API-key check (``api_key_auth``): what it guards, how it reads the header,
what it answers, what it leaves alone, and that it loads the way vLLM loads ``--middleware``."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import logging
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from ray.serve.exceptions import BackPressureError

from eks_inference.charts.shipped import API_KEY_AUTH_MODULE, VLLM_API_KEY_MIDDLEWARE
from eks_inference.serve import api_key_auth
from eks_inference.serve.api_key_auth import (
    API_KEY_ENV,
    APIKeyMiddleware,
    VLLMAPIKeyMiddleware,
    bearer_credentials,
)
from tests.helpers.serve_fakes import HTTPResult, call_app

SOURCE = Path(api_key_auth.__file__)
KEY = "k3y-0f-the-platform"


async def _no_content(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def request(app: Any, method: str, path: str, authorization: str | None = None) -> HTTPResult:
    headers = {"Authorization": authorization} if authorization is not None else {}
    return asyncio.run(call_app(app, method, path, request_headers=headers))


def assert_unauthorized(result: HTTPResult) -> None:
    assert result.status == 401, result.body
    assert result.headers["www-authenticate"] == "Bearer"
    assert result.headers["content-type"] == "application/json"
    error = result.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "invalid_api_key",
        None,
    )


# -- what is guarded -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat/completions",
        "/v1",
        "/v1beta/models",
        "/invocations",
        "/tokenize",
        "/detokenize",
        "/docs",
        "/openapi.json",
        "/inference/v1/generate",
        "/-/routes",
        "/health/",
        "/v1/../health",
        "/metrics",
        "/",
    ],
)
@pytest.mark.parametrize("method", ["GET", "POST", "OPTIONS", "HEAD"])
def test_every_path_but_health_needs_the_key(path: str, method: str) -> None:
    checked = APIKeyMiddleware(_no_content, KEY)
    assert_unauthorized(request(checked, method, path))
    assert request(checked, method, path, f"Bearer {KEY}").status == 204


def test_health_stays_open_for_probes_and_health_checks() -> None:
    assert request(APIKeyMiddleware(_no_content, KEY), "GET", "/health").status == 204


def test_vllm_leaves_metrics_open_for_prometheus_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(API_KEY_ENV, KEY)
    checked = VLLMAPIKeyMiddleware(_no_content)
    assert request(checked, "GET", "/metrics").status == 204
    assert request(checked, "GET", "/health").status == 204
    for path in ("/metrics/", "/metricsx", "/invocations", "/v1/models"):
        assert_unauthorized(request(checked, "GET", path))


def test_paths_are_checked_below_the_root_path() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    for path, status in (("/prefix/v1/models", 401), ("/prefix/health", 204)):
        sent.clear()
        scope = {"type": "http", "method": "GET", "path": path, "root_path": "/prefix"}
        asyncio.run(APIKeyMiddleware(_no_content, KEY)(scope | {"headers": []}, receive, send))
        assert sent[0]["status"] == status


def test_a_websocket_without_the_key_is_refused_before_the_handshake() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    scope = {"type": "websocket", "path": "/v1/realtime", "root_path": "", "headers": []}
    asyncio.run(APIKeyMiddleware(_no_content, KEY)(scope, receive, send))
    assert sent == [{"type": "websocket.close", "code": 1008}]


# -- the header ------------------------------------------------------------------------------


@pytest.mark.parametrize("header", [f"Bearer {KEY}", f"bearer {KEY}", f"BEARER {KEY}"])
def test_the_scheme_is_case_insensitive(header: str) -> None:
    assert request(APIKeyMiddleware(_no_content, KEY), "GET", "/v1/models", header).status == 204


def test_one_space_separates_the_scheme_from_the_key_as_vllms_own_check_requires() -> None:
    assert bearer_credentials(f"bearer {KEY}".encode()) == KEY.encode()
    # vLLM's check behind this one would refuse it in its own shape: refused here instead.
    assert bearer_credentials(f"Bearer  {KEY}".encode()) is None
    assert_unauthorized(
        request(APIKeyMiddleware(_no_content, KEY), "GET", "/v1/models", f"Bearer  {KEY}")
    )


@pytest.mark.parametrize(
    "header",
    [
        KEY,
        f"Basic {KEY}",
        f"Bearer {KEY}x",
        f"Bearer {KEY[:-1]}",
        f"Bearer {KEY.upper()}",
        "Bearer ",
        "Bearer",
        f"Bearer{KEY}",
        "",
    ],
)
def test_the_key_is_compared_whole_and_exactly(header: str) -> None:
    assert_unauthorized(request(APIKeyMiddleware(_no_content, KEY), "GET", "/v1/models", header))


def test_an_empty_key_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        APIKeyMiddleware(_no_content, "")


@pytest.mark.parametrize(
    "key",
    [f"{KEY}\n", f"{KEY}\r\n", f"{KEY} ", f" {KEY}", f"{KEY}\t", f"k\x00{KEY}", f"{KEY}\u00e9"],
)
def test_a_key_no_client_can_send_is_refused_at_start_up(key: str) -> None:
    """A key stored with a trailing newline (or any character an ``Authorization`` header
    cannot carry as sent, or vLLM's own check behind this one decodes differently) would
    refuse every request: refused when the server starts instead, without echoing it."""
    with pytest.raises(ValueError, match="cannot carry") as refused:
        APIKeyMiddleware(_no_content, key)
    assert KEY not in str(refused.value)


@pytest.mark.parametrize("key", ["k", "sk-Az09._~+/=", "two words", "tab\tinside", "!#$%&'*"])
def test_any_key_a_header_carries_as_sent_is_accepted(key: str) -> None:
    checked = APIKeyMiddleware(_no_content, key)
    assert request(checked, "GET", "/v1/models", f"Bearer {key}").status == 204


def test_keys_are_compared_as_digests_in_constant_time() -> None:
    """The comparison is ``hmac.compare_digest`` of fixed-length digests, so a wrong key's
    length does not change what is compared."""
    tree = ast.parse(SOURCE.read_text())
    compared = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "hmac.compare_digest"
    ]
    assert len(compared) == 1
    assert "hashlib.sha256" in ast.unparse(compared[0].args[0])


# -- what passes through untouched -----------------------------------------------------------


def test_the_applications_answers_pass_through_unchanged() -> None:
    """Serve's back-pressure 503, with its Retry-After, reaches the client as sent."""

    async def shedding(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send(
            {"type": "http.response.start", "status": 503, "headers": [(b"retry-after", b"2")]}
        )
        await send({"type": "http.response.body", "body": b"busy"})

    result = request(APIKeyMiddleware(shedding, KEY), "POST", "/v1/completions", f"Bearer {KEY}")
    assert (result.status, result.headers, result.body) == (503, {"retry-after": "2"}, b"busy")


def test_the_applications_exceptions_propagate_as_raised() -> None:
    """A back-pressure error raised in the app reaches Serve as itself, which answers 503;
    the check never turns it into a 500 of its own."""

    async def overloaded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise BackPressureError(num_queued_requests=10, max_queued_requests=10)

    with pytest.raises(BackPressureError) as raised:
        request(APIKeyMiddleware(overloaded, KEY), "POST", "/v1/completions", f"Bearer {KEY}")
    assert raised.value.status_code == 503


def test_lifespan_events_pass_unchecked() -> None:
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    async def nothing() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    async def ignore(message: Any) -> None:
        return None

    asyncio.run(APIKeyMiddleware(app, KEY)({"type": "lifespan"}, nothing, ignore))
    assert seen == ["lifespan"]


# -- the key stays secret --------------------------------------------------------------------


def test_the_key_is_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    checked = APIKeyMiddleware(_no_content, KEY)
    for header in (f"Bearer {KEY}", f"Bearer {KEY}x", None):
        request(checked, "GET", "/v1/models", header)
    assert KEY not in caplog.text
    assert "logging" not in {
        alias.name
        for node in ast.walk(ast.parse(SOURCE.read_text()))
        if isinstance(node, ast.Import)
        for alias in node.names
    }


def test_the_rejection_does_not_echo_the_credentials() -> None:
    result = request(APIKeyMiddleware(_no_content, KEY), "GET", "/v1/models", "Bearer wrong-k3y")
    assert b"wrong-k3y" not in result.body
    assert not [value for value in result.headers.values() if "wrong-k3y" in value]


# -- shipped alone, loaded by vLLM -----------------------------------------------------------


def test_it_imports_only_the_standard_library() -> None:
    roots = set()
    for node in ast.walk(ast.parse(SOURCE.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            assert node.module is not None
            roots.add(node.module.split(".")[0])
    assert roots <= set(sys.stdlib_module_names), roots - set(sys.stdlib_module_names)


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The module alone in a directory on the path, as the ConfigMap puts it in a pod."""
    shutil.copy(SOURCE, tmp_path / f"{API_KEY_AUTH_MODULE}.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop(API_KEY_AUTH_MODULE, None)


def _load_as_vllm_does(app: FastAPI, import_path: str) -> None:
    """vLLM's loader of ``--middleware`` (``init_entrypoints_middleware`` in v0.29.0 and v0.34.0,
    ``build_app`` in v0.16.0): import the object; a class is added with nothing but the app."""
    module_path, object_name = import_path.rsplit(".", 1)
    imported = getattr(importlib.import_module(module_path), object_name)
    assert inspect.isclass(imported)
    app.add_middleware(imported)


def _models_app() -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": []})

    return app


@pytest.mark.usefixtures("shipped")
def test_vllm_loads_the_shipped_middleware_by_its_import_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(API_KEY_ENV, KEY)
    app = _models_app()
    _load_as_vllm_does(app, VLLM_API_KEY_MIDDLEWARE)
    assert_unauthorized(request(app, "GET", "/v1/models"))
    assert request(app, "GET", "/v1/models", f"bearer {KEY}").status == 200


@pytest.mark.usefixtures("shipped")
def test_vllm_without_its_key_fails_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    app = _models_app()
    _load_as_vllm_does(app, VLLM_API_KEY_MIDDLEWARE)

    async def startup() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    async def ignore(message: Any) -> None:
        return None

    # Starlette builds its middleware stack on the first event it gets: the server's start-up.
    with pytest.raises(RuntimeError, match=f"{API_KEY_ENV} is unset or empty"):
        asyncio.run(app({"type": "lifespan"}, startup, ignore))
