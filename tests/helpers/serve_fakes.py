"""An in-memory engine and a minimal ASGI client for testing the Neuron server
(:mod:`eks_inference.serve.neuron`) without vLLM, Ray or an HTTP stack, and the
application arguments the tests share.

The engine is deterministic: a token is a whitespace-separated word (plus a BOS token when
special tokens are added), and generation replays ``reply`` one word per step.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from eks_inference.serve.api_key_auth import API_KEY_ENV
from eks_inference.serve.neuron.config import ServerConfig
from eks_inference.serve.neuron.engine import GenerationStep, InvalidRequestError, SamplingOptions

BOS = 1
# The args of a Neuron application, as the chart renders them for a server without a key.
APP_ARGS: dict[str, Any] = {
    "model": "/models/llama-3-8b",
    "served_model_name": "llama-3-8b",
    "tensor_parallel_size": 2,
    "max_model_len": 4096,
    "max_num_seqs": 8,
    "block_size": 32,
    "dtype": "bfloat16",
    "additional_config": {"override_neuron_config": {"enable_bucketing": True}},
}
# A small Neuron server that requires the platform's key, read from API_KEY_ENV.
KEYED_CONFIG = ServerConfig(
    model="/models/llama-3-8b",
    served_model_name="llama-3-8b",
    tensor_parallel_size=2,
    max_model_len=64,
    max_num_seqs=4,
    block_size=32,
    dtype="bfloat16",
    additional_config={"override_neuron_config": {}},
    api_key_env=API_KEY_ENV,
)


@dataclass
class GenerateCall:
    prompt_token_ids: list[int]
    options: SamplingOptions
    request_id: str


@dataclass
class FakeEngine:
    reply: tuple[str, ...] = ("Hello", " there", ",", " friend", ".")
    healthy: bool = True
    fail_after: int | None = None
    """Raise ``failure`` after this many steps."""
    failing_calls: frozenset[int] | None = None
    """Which generations (by call order) fail; all of them when ``None``."""
    failure: Exception = field(default_factory=lambda: RuntimeError("engine failed"))
    hold_after: int | None = None
    """Block (until closed) after this many steps, unless failing."""
    calls: list[GenerateCall] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    shut_down: bool = False

    async def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        words = [100 + index for index, _ in enumerate(text.split())]
        return [BOS, *words] if add_special_tokens else words

    async def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        roles = [m["role"] for m in messages]
        if any(a == b for a, b in itertools.pairwise(roles)):
            raise InvalidRequestError("roles must alternate")
        return "".join(f"<|{m['role']}|> {m['content']} " for m in messages) + "<|assistant|>"

    def generate(
        self, prompt_token_ids: list[int], options: SamplingOptions, request_id: str
    ) -> AsyncGenerator[GenerationStep, None]:
        if options.seed is not None and options.seed < 0:
            raise InvalidRequestError("seed must be non-negative")
        fails = self.fail_after is not None and (
            self.failing_calls is None or len(self.calls) in self.failing_calls
        )
        self.calls.append(GenerateCall(prompt_token_ids, options, request_id))
        return self._steps(options, request_id, fails)

    async def _steps(
        self, options: SamplingOptions, request_id: str, fails: bool
    ) -> AsyncGenerator[GenerationStep, None]:
        words = self.reply[: options.max_tokens]
        done = False
        try:
            for produced, word in enumerate(words, start=1):
                await asyncio.sleep(0)
                if fails and self.fail_after is not None and produced > self.fail_after:
                    raise self.failure
                if not fails and self.hold_after is not None and produced > self.hold_after:
                    await asyncio.Event().wait()
                last = produced == len(words)
                reason = ("stop" if len(words) == len(self.reply) else "length") if last else None
                yield GenerationStep(text=word, completion_tokens=produced, finish_reason=reason)
            done = True
        finally:
            (self.finished if done else self.aborted).append(request_id)

    async def is_healthy(self) -> bool:
        return self.healthy

    def shutdown(self) -> None:
        self.shut_down = True


@dataclass
class HTTPResult:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[str]:
        """The ``data:`` payloads of a server-sent event stream, in order."""
        text = self.body.decode()
        assert text.endswith("\n\n"), "every event ends with a blank line"
        events = []
        for block in text.split("\n\n")[:-1]:
            assert block.startswith("data: "), block
            events.append(block.removeprefix("data: "))
        return events

    def event_payloads(self) -> list[dict[str, Any]]:
        events = self.events()
        assert events[-1] == "[DONE]"
        return [json.loads(event) for event in events[:-1]]


async def call_app(
    app: Any,
    method: str,
    path: str,
    payload: Any = None,
    *,
    raw_body: bytes | None = None,
    disconnect_after_chunks: int | None = None,
    request_headers: dict[str, str] | None = None,
) -> HTTPResult:
    """Send one HTTP request to an ASGI app and collect the response.

    With ``disconnect_after_chunks`` the client goes away once that many body chunks arrived,
    as a browser closing a stream would. ``request_headers`` are sent besides the defaults.
    """
    body = (
        raw_body
        if raw_body is not None
        else b""
        if payload is None
        else json.dumps(payload).encode()
    )
    scope = {
        "type": "http",
        # 2.3 makes Starlette listen for disconnects while streaming, as under Ray Serve.
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *((k.lower().encode(), v.encode()) for k, v in (request_headers or {}).items()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }
    request_sent = False
    gone = asyncio.Event()
    status = 0
    headers: dict[str, str] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal request_sent
        if not request_sent:
            request_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            headers.update((k.decode(), v.decode()) for k, v in message.get("headers", []))
        elif message["type"] == "http.response.body":
            if message.get("body"):
                chunks.append(message["body"])
            finished = not message.get("more_body", False)
            leaving = disconnect_after_chunks is not None and len(chunks) >= disconnect_after_chunks
            if finished or leaving:
                gone.set()

    # A response that never completes fails the test instead of hanging it.
    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    return HTTPResult(status=status, headers=headers, body=b"".join(chunks))
