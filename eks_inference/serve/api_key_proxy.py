"""The platform's API-key check in front of a server that cannot load it: a reverse proxy.

NVIDIA Dynamo's frontend is a Rust HTTP server: it loads no ASGI middleware, so the check every
other engine runs inside its server (:mod:`.api_key_auth`) runs here instead, in pods of their
own in front of the frontend's Service (``python3 -m eks_inference_serve.api_key_proxy``,
shipped beside the check as the Ray and Triton pods get theirs, in the Dynamo runtime image,
which has uvicorn and aiohttp as vLLM's dependencies). The load balancer and in-cluster clients
reach only this proxy; a NetworkPolicy lets nothing but these pods (and Prometheus) reach the
frontend.

Every request is answered by :class:`~.api_key_auth.APIKeyMiddleware` first, so a request
without the key never reaches the frontend, whatever its path. What passes is forwarded as
it came: method, path, query string and body, the headers without the hop-by-hop ones (RFC
9110 section 7.6.1), streamed both ways so server-sent events of a streaming completion reach
the client token by token. The open paths are ``/health`` (the kubelet's probes and the load
balancer's health check, forwarded to the frontend's own health route, so the target is
healthy only when the frontend answers) and nothing else: Prometheus scrapes the frontend
directly.

The key is read once, from ``VLLM_API_KEY`` (as every engine's pods read it, from the
platform's Secret), and never logged. The upstream is ``http://<host>:<port>`` given on the
command line; ``--no-key`` (a platform whose endpoint authenticates nobody, or none) forwards
without the check, so the frontend is still reached only through these pods.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from .api_key_auth import (
    API_KEY_ENV,
    APIKeyMiddleware,
    Receive,
    Scope,
    Send,
    api_key_from_environment,
)

# RFC 9110 section 7.6.1: headers meant for one connection, never forwarded; Host is the
# upstream's own.
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
    }
)
_CHUNK = 64 * 1024


def forwarded_headers(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """``headers`` as sent upstream: the hop-by-hop ones (and those the client's
    ``Connection`` header names) left out."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    return [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in headers
        if name.lower() not in _HOP_BY_HOP and name.lower() not in named
    ]


class Forwarder:
    """ASGI app forwarding each HTTP request to ``upstream`` and streaming the answer back.

    A WebSocket is refused (close 1008): the frontend's API is plain HTTP. An upstream that
    does not answer gets the client a 502.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self._session: Any = None

    async def _client(self) -> Any:
        if self._session is None:
            import aiohttp  # the runtime image's; imported when the first request arrives

            # No total timeout: a long generation streams for minutes; the load balancer's
            # idle timeout bounds a silent one.
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                auto_decompress=False,
            )
        return self._session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        query = scope.get("query_string", b"").decode("latin-1")
        url = f"{self.upstream}{scope['path']}" + (f"?{query}" if query else "")
        session = await self._client()
        try:
            response = await session.request(
                scope["method"],
                url,
                headers=forwarded_headers(scope.get("headers", [])),
                data=bytes(body),
                allow_redirects=False,
            )
        except OSError:
            await _answer(send, 502, b'{"error": {"message": "the frontend did not answer"}}')
            return
        async with response:
            # The body is streamed as it comes (chunked), so its length is not forwarded.
            headers = [
                (name, value)
                for name, value in response.raw_headers
                if name.lower() not in _HOP_BY_HOP and name.lower() != b"content-length"
            ]
            await send(
                {"type": "http.response.start", "status": response.status, "headers": headers}
            )
            async for chunk in response.content.iter_chunked(_CHUNK):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    async def close(self) -> None:
        """Close the connections to the upstream (at the server's shutdown)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def proxy_app(upstream: str, api_key: str | None) -> APIKeyMiddleware | Forwarder:
    """The proxy: the key check around a :class:`Forwarder` to ``upstream``; without a key
    (a platform whose endpoint authenticates nobody), the forwarder alone."""
    forwarder = Forwarder(upstream)
    return forwarder if api_key is None else APIKeyMiddleware(forwarder, api_key)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the proxy: ``--upstream http://host:port --port N --keep-alive S [--no-key]``."""
    parser = argparse.ArgumentParser(description="API-key reverse proxy")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--keep-alive", type=int, required=True)
    parser.add_argument("--no-key", action="store_true")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(
        proxy_app(args.upstream, None if args.no_key else api_key_from_environment(API_KEY_ENV)),
        host="0.0.0.0",
        port=args.port,
        timeout_keep_alive=args.keep_alive,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
