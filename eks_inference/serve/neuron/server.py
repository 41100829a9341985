"""The OpenAI-compatible server: request handling for the routes, independent of Ray.

Routes (JSON shaped like OpenAI's, errors as ``{"error": {message, type, param, code}}``):

* ``GET /health``: 200 while the engine is alive, 503 once it has died.
* ``GET /v1/models`` and ``GET /v1/models/{model}``: the one served model.
* ``POST /v1/completions``: text prompts (a string or a list of strings).
* ``POST /v1/chat/completions``: messages rendered with the model's chat template.

Both generation routes stream server-sent events (``data: {...}`` chunks, then
``data: [DONE]``) when ``stream`` is true, and honour ``stream_options.include_usage``.
Sampling supports ``max_tokens`` (``max_completion_tokens`` for chat), ``temperature``,
``top_p``, ``presence_penalty``, ``frequency_penalty``, ``stop`` and ``seed``; requests for
features this server does not implement (several choices, log probabilities, tools, JSON mode,
echo, suffix, logit bias) fail with 400 rather than being silently ignored.
"""

import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

# The API-key check is the one module above this package: a parent-relative import, since the
# pods' copy of the tree has another root package (eks_inference_serve) than the project's.
from ..api_key_auth import APIKeyMiddleware  # noqa: TID252
from .config import ServerConfig
from .engine import GenerationStep, InferenceEngine, InvalidRequestError, SamplingOptions
from .errors import APIError, api_error_response, http_error_response
from .schemas import ChatCompletionRequest, CompletionRequest, GenerationRequest, parse_request
from .streaming import SSE_DONE, SSE_HEADERS, interleave, sse

# Ray Serve routes records of this logger into the replica's log files.
logger = logging.getLogger("ray.serve")

# OpenAI's default for /v1/completions when max_tokens is absent; chat defaults to the rest of
# the context window instead, as OpenAI and vLLM do.
DEFAULT_COMPLETION_MAX_TOKENS = 16


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


@dataclass
class _Choice:
    """One generation accumulated for a non-streaming response."""

    parts: list[str] = field(default_factory=list)
    completion_tokens: int = 0
    finish_reason: str | None = None

    def add(self, step: GenerationStep) -> None:
        self.parts.append(step.text)
        self.completion_tokens = step.completion_tokens
        self.finish_reason = step.finish_reason

    @property
    def text(self) -> str:
        return "".join(self.parts)


class OpenAIServer:
    """Request handling for the OpenAI routes, independent of Ray so it can be tested alone.

    Prompts are tokenized here, so every request is checked against the context window (and
    usage is known) before the engine is asked for anything. With ``api_key`` every route but
    ``/health`` requires it (:class:`APIKeyMiddleware`).
    """

    def __init__(
        self, config: ServerConfig, engine: InferenceEngine, api_key: str | None = None
    ) -> None:
        self.config = config
        self.engine = engine
        self.api_key = api_key
        self.created = int(time.time())

    def asgi_app(self) -> FastAPI:
        app = FastAPI(
            title="eks-inference Neuron server",
            summary=f"OpenAI-compatible API for {self.config.served_model_name} on Inferentia2",
            docs_url=None,
            redoc_url=None,
            openapi_url=None,
        )
        app.add_api_route("/health", self.health, methods=["GET"])
        app.add_api_route("/v1/models", self.list_models, methods=["GET"])
        app.add_api_route("/v1/models/{model_id:path}", self.retrieve_model, methods=["GET"])
        app.add_api_route("/v1/completions", self.create_completion, methods=["POST"])
        app.add_api_route("/v1/chat/completions", self.create_chat_completion, methods=["POST"])
        app.add_exception_handler(APIError, api_error_response)
        # Unknown routes and wrong methods answer in the same error shape as everything else.
        app.add_exception_handler(StarletteHTTPException, http_error_response)
        if self.api_key is not None:
            app.add_middleware(APIKeyMiddleware, api_key=self.api_key)
        return app

    # -- routes --------------------------------------------------------------------------------

    async def health(self) -> Response:
        if await self.engine.is_healthy():
            return Response(status_code=200)
        return APIError(
            503, "the inference engine is not running", error_type="server_error"
        ).response()

    async def list_models(self) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [self._model_card()]})

    async def retrieve_model(self, model_id: str) -> JSONResponse:
        self._check_model(model_id)
        return JSONResponse(self._model_card())

    async def create_completion(self, request: Request) -> Response:
        body = parse_request(await request.body(), CompletionRequest)
        self._check_model(body.model)
        prompts = [await self.engine.encode(text, add_special_tokens=True) for text in body.prompts]
        request_id = f"cmpl-{uuid.uuid4().hex}"
        streams = [
            self._start(ids, body, f"{request_id}-{index}", DEFAULT_COMPLETION_MAX_TOKENS)
            for index, ids in enumerate(prompts)
        ]
        prompt_tokens = sum(len(ids) for ids in prompts)
        created = int(time.time())
        if body.stream:
            events = self._completion_events(
                request_id, created, streams, prompt_tokens, body.include_usage
            )
            return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
        choices = await self._run(streams)
        return JSONResponse(
            {
                "id": request_id,
                "object": "text_completion",
                "created": created,
                "model": self.config.served_model_name,
                "choices": [
                    {
                        "index": index,
                        "text": choice.text,
                        "logprobs": None,
                        "finish_reason": choice.finish_reason,
                    }
                    for index, choice in enumerate(choices)
                ],
                "usage": _usage(prompt_tokens, sum(c.completion_tokens for c in choices)),
            }
        )

    async def create_chat_completion(self, request: Request) -> Response:
        body = parse_request(await request.body(), ChatCompletionRequest)
        self._check_model(body.model)
        messages = [{"role": m.role, "content": m.content} for m in body.messages]
        try:
            rendered = await self.engine.apply_chat_template(messages)
        except InvalidRequestError as exc:
            raise APIError(400, str(exc), param="messages") from None
        # The template already contains the special tokens (BOS); adding them again would
        # change what the model sees.
        ids = await self.engine.encode(rendered, add_special_tokens=False)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        stream = self._start(ids, body, request_id, default_max_tokens=None)
        created = int(time.time())
        if body.stream:
            events = self._chat_events(request_id, created, stream, len(ids), body.include_usage)
            return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
        (choice,) = await self._run([stream])
        return JSONResponse(
            {
                "id": request_id,
                "object": "chat.completion",
                "created": created,
                "model": self.config.served_model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": choice.text},
                        "logprobs": None,
                        "finish_reason": choice.finish_reason,
                    }
                ],
                "usage": _usage(len(ids), choice.completion_tokens),
            }
        )

    # -- request handling ------------------------------------------------------------------------

    def _model_card(self) -> dict[str, Any]:
        return {
            "id": self.config.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "eks-inference",
            "root": self.config.model,
            "max_model_len": self.config.max_model_len,
        }

    def _check_model(self, model: str | None) -> None:
        # An absent model means the only one served, as in vLLM.
        if model is not None and model != self.config.served_model_name:
            raise APIError(
                404,
                f"The model `{model}` does not exist. "
                f"This server serves `{self.config.served_model_name}`.",
                param="model",
                code="model_not_found",
            )

    def _start(
        self,
        prompt_token_ids: list[int],
        body: GenerationRequest,
        request_id: str,
        default_max_tokens: int | None,
    ) -> AsyncGenerator[GenerationStep, None]:
        """Check the prompt against the context window and start its generation."""
        context = self.config.max_model_len
        prompt_len = len(prompt_token_ids)
        room = context - prompt_len
        if room <= 0:
            raise APIError(
                400,
                f"This model's maximum context length is {context} tokens, but the prompt has "
                f"{prompt_len} tokens. Please shorten the prompt.",
                param="messages" if isinstance(body, ChatCompletionRequest) else "prompt",
                code="context_length_exceeded",
            )
        requested = body.requested_max_tokens()
        if requested is None:
            max_tokens = room if default_max_tokens is None else min(default_max_tokens, room)
        elif requested > room:
            raise APIError(
                400,
                f"This model's maximum context length is {context} tokens. However, you "
                f"requested {prompt_len + requested} tokens ({prompt_len} in the prompt, "
                f"{requested} in the completion). Please reduce the prompt or the completion.",
                param="max_tokens",
                code="context_length_exceeded",
            )
        else:
            max_tokens = requested
        options = SamplingOptions(
            max_tokens=max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            presence_penalty=body.presence_penalty,
            frequency_penalty=body.frequency_penalty,
            stop=body.stop_sequences,
            seed=body.seed,
        )
        try:
            return self.engine.generate(prompt_token_ids, options, request_id)
        except InvalidRequestError as exc:
            raise APIError(400, str(exc)) from None

    async def _failure(self, exc: Exception) -> APIError:
        """Classify an error raised while generating."""
        if isinstance(exc, InvalidRequestError):
            return APIError(400, str(exc))
        if not await self.engine.is_healthy():
            # 503 tells clients (and Ray Serve's retries) to go to another replica; Serve's
            # health check replaces this one.
            return APIError(
                503,
                "the inference engine stopped; retry the request",
                error_type="server_error",
                code="engine_unavailable",
            )
        logger.error("Generation failed", exc_info=exc)
        return APIError(500, "the generation failed", error_type="server_error")

    async def _run(self, streams: Sequence[AsyncGenerator[GenerationStep, None]]) -> list[_Choice]:
        choices = [_Choice() for _ in streams]
        try:
            async with contextlib.aclosing(interleave(streams)) as steps:
                async for index, step in steps:
                    choices[index].add(step)
        except Exception as exc:
            raise await self._failure(exc) from exc
        return choices

    async def _completion_events(
        self,
        request_id: str,
        created: int,
        streams: Sequence[AsyncGenerator[GenerationStep, None]],
        prompt_tokens: int,
        include_usage: bool,
    ) -> AsyncIterator[str]:
        header = {
            "id": request_id,
            "object": "text_completion",
            "created": created,
            "model": self.config.served_model_name,
        }
        # OpenAI sends "usage": null on every chunk when usage was asked for, then one chunk
        # with empty choices that carries it.
        usage_field: dict[str, Any] = {"usage": None} if include_usage else {}
        completion_tokens = [0] * len(streams)
        try:
            async with contextlib.aclosing(interleave(streams)) as steps:
                async for index, step in steps:
                    completion_tokens[index] = step.completion_tokens
                    if not step.text and step.finish_reason is None:
                        continue
                    choice = {
                        "index": index,
                        "text": step.text,
                        "logprobs": None,
                        "finish_reason": step.finish_reason,
                    }
                    yield sse({**header, "choices": [choice], **usage_field})
            if include_usage:
                usage = _usage(prompt_tokens, sum(completion_tokens))
                yield sse({**header, "choices": [], "usage": usage})
        except Exception as exc:
            yield sse((await self._failure(exc)).body())
        yield SSE_DONE

    async def _chat_events(
        self,
        request_id: str,
        created: int,
        stream: AsyncGenerator[GenerationStep, None],
        prompt_tokens: int,
        include_usage: bool,
    ) -> AsyncIterator[str]:
        header = {
            "id": request_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": self.config.served_model_name,
        }
        usage_field: dict[str, Any] = {"usage": None} if include_usage else {}

        def chunk(delta: dict[str, str], finish_reason: str | None) -> str:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            return sse({**header, "choices": [choice], **usage_field})

        completion_tokens = 0
        try:
            yield chunk({"role": "assistant", "content": ""}, None)
            async with contextlib.aclosing(stream):
                async for step in stream:
                    completion_tokens = step.completion_tokens
                    if step.text:
                        yield chunk({"content": step.text}, None)
                    if step.finish_reason is not None:
                        yield chunk({}, step.finish_reason)
            if include_usage:
                usage = _usage(prompt_tokens, completion_tokens)
                yield sse({**header, "choices": [], "usage": usage})
        except Exception as exc:
            yield sse((await self._failure(exc)).body())
        yield SSE_DONE
