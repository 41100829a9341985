"""The API-key proxy in front of Dynamo's frontend: the key checked before anything is
forwarded, and what passes forwarded as it came, streamed back chunk by chunk."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from eks_inference.serve.api_key_auth import APIKeyMiddleware
from eks_inference.serve.api_key_proxy import Forwarder, forwarded_headers, proxy_app
from tests.helpers.serve_fakes import call_app

KEY = "k3y-0f-the-platform"


async def _with_upstream(check: Callable[[str, list[dict[str, Any]]], Awaitable[None]]) -> None:
    """Run ``check`` with the URL of an upstream recording every request it is sent."""
    seen: list[dict[str, Any]] = []

    async def record(request: web.Request) -> web.StreamResponse:
        seen.append(
            {
                "method": request.method,
                "path": request.path_qs,
                "headers": request.headers.copy(),
                "body": await request.read(),
            }
        )
        if request.path == "/v1/chat/completions":
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            for event in ('{"n": 1}', '{"n": 2}', "[DONE]"):
                await response.write(f"data: {event}\n\n".encode())
            await response.write_eof()
            return response
        return web.json_response({"reached": request.path}, status=200)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        await check(str(server.make_url("")).rstrip("/"), seen)
    finally:
        await server.close()


async def _closed(proxy: APIKeyMiddleware | Forwarder) -> None:
    forwarder = proxy.app if isinstance(proxy, APIKeyMiddleware) else proxy
    assert isinstance(forwarder, Forwarder)
    await forwarder.close()


def test_a_request_without_the_key_never_reaches_the_frontend() -> None:
    async def check(upstream: str, seen: list[dict[str, Any]]) -> None:
        proxy = proxy_app(upstream, KEY)
        for path in ("/v1/models", "/metrics", "/busy_threshold", "/docs", "/live"):
            refused = await call_app(proxy, "GET", path)
            assert refused.status == 401
            assert refused.json()["error"]["code"] == "invalid_api_key"
        wrong = await call_app(
            proxy, "GET", "/v1/models", request_headers={"Authorization": "Bearer nope"}
        )
        assert wrong.status == 401
        assert seen == []
        await _closed(proxy)

    asyncio.run(_with_upstream(check))


def test_with_the_key_the_request_is_forwarded_as_it_came_and_streamed_back() -> None:
    async def check(upstream: str, seen: list[dict[str, Any]]) -> None:
        proxy = proxy_app(upstream, KEY)
        payload = {"model": "m", "stream": True}
        answer = await call_app(
            proxy,
            "POST",
            "/v1/chat/completions",
            payload,
            request_headers={"Authorization": f"Bearer {KEY}", "x-request-id": "r1"},
        )
        assert answer.status == 200
        assert answer.events() == ['{"n": 1}', '{"n": 2}', "[DONE]"]
        (request,) = seen
        assert (request["method"], request["path"]) == ("POST", "/v1/chat/completions")
        assert json.loads(request["body"]) == payload
        assert request["headers"]["x-request-id"] == "r1"
        # The key travels on to the frontend, which ignores it; the Host is the upstream's.
        assert request["headers"]["Host"] != "testserver"
        await _closed(proxy)

    asyncio.run(_with_upstream(check))


def test_the_health_path_is_open_and_answered_by_the_frontend() -> None:
    async def check(upstream: str, seen: list[dict[str, Any]]) -> None:
        proxy = proxy_app(upstream, KEY)
        answer = await call_app(proxy, "GET", "/health")
        assert answer.json() == {"reached": "/health"}
        assert [r["path"] for r in seen] == ["/health"]
        await _closed(proxy)

    asyncio.run(_with_upstream(check))


def test_without_a_key_the_proxy_only_forwards() -> None:
    async def check(upstream: str, seen: list[dict[str, Any]]) -> None:
        proxy = proxy_app(upstream, None)
        answer = await call_app(proxy, "GET", "/v1/models")
        assert answer.json() == {"reached": "/v1/models"}
        await _closed(proxy)

    asyncio.run(_with_upstream(check))


def test_a_frontend_that_does_not_answer_is_a_bad_gateway() -> None:
    async def check() -> None:
        proxy = proxy_app("http://127.0.0.1:9", KEY)
        answer = await call_app(
            proxy, "GET", "/v1/models", request_headers={"Authorization": f"Bearer {KEY}"}
        )
        assert answer.status == 502
        await _closed(proxy)

    asyncio.run(check())


def test_hop_by_hop_headers_are_not_forwarded() -> None:
    headers = [
        (b"connection", b"keep-alive, x-private"),
        (b"x-private", b"1"),
        (b"keep-alive", b"timeout=5"),
        (b"host", b"testserver"),
        (b"authorization", b"Bearer k"),
        (b"content-type", b"application/json"),
    ]
    assert forwarded_headers(headers) == [
        ("authorization", "Bearer k"),
        ("content-type", "application/json"),
    ]
