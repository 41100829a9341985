"""The platform's API-key check: one ASGI middleware in front of every model server.

Every server the load balancer reaches runs behind :class:`APIKeyMiddleware`: standalone vLLM
loads it with its own ``--middleware`` flag (:class:`VLLMAPIKeyMiddleware`), the Ray Serve
applications add it to their ASGI app. Whatever the engine, a request is answered the same
way:

* every path needs ``Authorization: Bearer <key>``, whatever its method, except the health
  path (``/health``, for kubelet probes and the load balancer's health checks) and, on vLLM,
  ``/metrics`` (see :class:`VLLMAPIKeyMiddleware`). The engines' own checks guard only some
  prefixes (vLLM's ``--api-key`` leaves ``/invocations``, ``/tokenize`` and a dozen more
  open), so this check lists what stays open instead of what is guarded;
* the scheme is matched case-insensitively (RFC 7235 section 2.1: ``bearer`` is ``Bearer``),
  as vLLM's own check matches it; the credentials are compared in constant time, as
  digests, so neither their bytes nor their length leak through timing;
* a request without the key gets 401 with ``WWW-Authenticate: Bearer`` and OpenAI's error
  body (``code: invalid_api_key``), the one client libraries recognise, before it reaches the
  application; a WebSocket handshake is refused (close code 1008);
* everything else passes through untouched: the application's responses (a 503 with
  ``Retry-After`` when Serve sheds load, say) and its exceptions (which Ray Serve turns into
  its own status codes) are never rewritten here.

The key is read once, when the middleware is built, and never logged: this module logs
nothing at all.

This file is shipped into pods on its own (a ConfigMap on ``PYTHONPATH``) and loaded by vLLM
images and Ray images alike, so it imports only the standard library.
"""

import hashlib
import hmac
import json
import os
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, ClassVar

# The ASGI callables, spelled as Starlette spells them, without importing it.
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# vLLM reads its key from this variable itself; the Ray pods use the same name.
API_KEY_ENV = "VLLM_API_KEY"
HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"
# What an Authorization header carries as sent (RFC 9110 section 5.5: visible ASCII, with
# spaces and tabs only inside, since servers strip them at either end) and vLLM's own check
# behind this one matches too (it decodes header bytes as Latin-1 and encodes the key as UTF-8,
# so beyond ASCII they differ).
_SENDABLE_KEY = re.compile(r"[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?")
# RFC 6455 section 7.4.1: the endpoint refuses a message that violates its policy.
_WEBSOCKET_POLICY_VIOLATION = 1008
_UNAUTHORIZED_BODY = json.dumps(
    {
        "error": {
            "message": "a valid API key is required: send Authorization: Bearer <key>",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
).encode()


def api_key_from_environment(name: str) -> str:
    """The API key in environment variable ``name``; ``RuntimeError`` if it is unset or empty."""
    key = os.environ.get(name, "")
    if not key:
        raise RuntimeError(
            f"the API key environment variable {name} is unset or empty: the pod reads it from "
            "the platform's API-key Secret, which must exist (External Secrets Operator)"
        )
    return key


def bearer_credentials(authorization: bytes) -> bytes | None:
    """The credentials of an ``Authorization`` value with the ``Bearer`` scheme, else ``None``.

    The scheme is case-insensitive (RFC 7235 section 2.1) and followed by exactly one space
    and the credentials, the form every client sends. A value with more spaces is refused
    here rather than accepted: vLLM's own check, which stays on behind this one, would refuse
    it with a 401 of its own shape.
    """
    scheme, _, credentials = authorization.partition(b" ")
    if scheme.lower() != b"bearer" or not credentials or credentials.startswith(b" "):
        return None
    return credentials


class APIKeyMiddleware:
    """ASGI middleware: every path but :attr:`open_paths` needs ``Authorization: Bearer <key>``.

    Paths are compared exactly, below the scope's ``root_path``, so ``/health/`` or
    ``/v1/../health`` are checked like any other path. ``api_key`` must be one a client can
    send (visible ASCII, with spaces or tabs only inside): any other is refused with
    ``ValueError`` rather than left to refuse every request.
    """

    open_paths: ClassVar[frozenset[str]] = frozenset({HEALTH_PATH})

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        if not api_key:
            raise ValueError("APIKeyMiddleware needs a non-empty API key")
        if not _SENDABLE_KEY.fullmatch(api_key):
            # A key stored with a trailing newline, say, would refuse every request: the
            # server fails to start instead, with the reason in its log (never the key).
            raise ValueError(
                "the API key has characters an Authorization header cannot carry as sent "
                "(a trailing newline, spaces or tabs at either end, control or non-ASCII "
                "characters): store the key without them"
            )
        self.app = app
        self._digest = hashlib.sha256(api_key.encode()).digest()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        checked = scope["type"] in ("http", "websocket") and not self._open(scope)
        if checked and not self._authorized(scope):
            await self._reject(scope, send)
            return
        await self.app(scope, receive, send)

    def _open(self, scope: Scope) -> bool:
        path: str = scope.get("path", "")
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        return path in self.open_paths

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", []):
            if name.lower() == b"authorization":
                credentials = bearer_credentials(value)
                return credentials is not None and hmac.compare_digest(
                    hashlib.sha256(credentials).digest(), self._digest
                )
        return False

    @staticmethod
    async def _reject(scope: Scope, send: Send) -> None:
        if scope["type"] == "websocket":
            # Refused before the handshake is accepted: the server answers it with 403.
            await send({"type": "websocket.close", "code": _WEBSOCKET_POLICY_VIOLATION})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(_UNAUTHORIZED_BODY)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": _UNAUTHORIZED_BODY})


class VLLMAPIKeyMiddleware(APIKeyMiddleware):
    """The check as vLLM's ``--middleware api_key_auth.VLLMAPIKeyMiddleware`` loads it.

    vLLM adds a middleware class with ``app.add_middleware(cls)``, passing nothing but the
    app, after its own middlewares, so this one is the outermost and answers first. The key
    is read from ``VLLM_API_KEY``, the variable vLLM's own (narrower) check reads too, when
    Starlette builds its middleware stack at server start-up: a pod without it fails to start
    rather than serve unauthenticated.

    ``/metrics`` stays open as well as ``/health``: Prometheus scrapes it inside the cluster,
    and requiring the key there would copy the key into the monitoring stack. The load balancer
    never forwards it (only ``/v1`` paths reach a server through it), and the metrics hold
    counts and timings, never prompts or completions.
    """

    open_paths: ClassVar[frozenset[str]] = frozenset({HEALTH_PATH, METRICS_PATH})

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app, api_key_from_environment(API_KEY_ENV))
