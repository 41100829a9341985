"""Ray Serve application: one model on Inferentia2 with vLLM and the Neuron plugin, served
behind OpenAI-compatible HTTP routes.

Why this exists: Ray Serve LLM (``ray.serve.llm``) has no working Neuron path, so on Inferentia2
the RayService runs this application instead. Each replica of the ``NeuronLLMServer``
deployment owns one vLLM engine on the NeuronCores Ray assigned to it; the vLLM Neuron plugin
(``vllm-neuron``, NxD Inference) loads the model precompiled at ``NEURON_COMPILED_ARTIFACTS``,
which the chart sets in the pod's environment. Ray Serve provides routing, autoscaling on
ongoing requests and replica health checks.

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

Deployment contract with the chart that renders the Serve config (``import_path:
"neuron_app:build_app"``): :func:`build_app` receives ``args`` with exactly the keys of
:class:`ServerConfig`; the deployment is named ``NeuronLLMServer`` and its replica count,
autoscaling, ``max_ongoing_requests`` and ``ray_actor_options.resources.neuron_cores`` come
from the Serve config, never from this file.

API keys. With ``api_key_env`` set, every route but ``/health`` requires ``Authorization:
Bearer <key>``, the key being read from that environment variable when the replica starts (a
replica without it fails to start rather than serve unauthenticated). The check is the
platform's one API-key middleware, ``api_key_auth.APIKeyMiddleware``, which standalone vLLM
loads too, so every engine answers a missing or wrong key with the same 401 in OpenAI's error
shape. GPU RayServices that require the key run Ray Serve LLM's own application behind it
(:func:`build_ray_llm_app`, ``import_path: "neuron_app:build_ray_llm_app"``).

This module and ``api_key_auth`` are copied into pods together (one ConfigMap on
``PYTHONPATH``), so it imports nothing else of the project: only the standard library, Ray,
FastAPI/Starlette and pydantic (all in the image and on the Ray head), and vLLM lazily inside
:class:`VLLMNeuronEngine`, the single adapter that touches vLLM. The head (which only builds
the application) and unit tests import it without vLLM installed.
"""

import asyncio
import contextlib
import inspect
import json
import logging
import os
import re
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, TypeVar, cast

import ray
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

# The API-key check is shipped beside this file; it is a sibling module when the package is
# installed and a top-level one on the pods' PYTHONPATH.
try:
    from .api_key_auth import APIKeyMiddleware, api_key_from_environment
except ImportError:
    from api_key_auth import (  # type: ignore[import-not-found,no-redef]
        APIKeyMiddleware,
        api_key_from_environment,
    )

# Ray Serve routes records of this logger into the replica's log files.
logger = logging.getLogger("ray.serve")

# OpenAI's default for /v1/completions when max_tokens is absent; chat defaults to the rest of
# the context window instead, as OpenAI and vLLM do.
DEFAULT_COMPLETION_MAX_TOKENS = 16

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_ENV_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]*$"


# --------------------------------------------------------------------------------------------
# Application arguments
# --------------------------------------------------------------------------------------------


class ServerConfig(BaseModel):
    """The ``args`` of the Serve application, validated when the application is built.

    Every key is required and unknown keys are rejected, so a Serve config written for another
    version of this file fails on the Ray head with a message naming the key, instead of on an
    Inferentia node after minutes of model loading.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    model: str = Field(min_length=1, description="Local path of the model weights.")
    served_model_name: str = Field(min_length=1, description="Model id clients send.")
    tensor_parallel_size: int = Field(gt=0)
    max_model_len: int = Field(gt=0)
    max_num_seqs: int = Field(gt=0, description="Compiled batch size on Neuron.")
    block_size: int = Field(gt=0)
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        description="Weights and activations dtype; part of the compiled graph, so it must be "
        "the dtype the artifacts were compiled for (standalone vLLM passes the same --dtype)."
    )
    additional_config: dict[str, Any] = Field(
        description="vLLM additional_config for the Neuron plugin (override_neuron_config)."
    )
    api_key_env: str | None = Field(
        default=None,
        pattern=_ENV_NAME_PATTERN,
        description="Environment variable holding the API key /v1 routes require; none: no "
        "key. The chart always passes it.",
    )

    @field_validator("additional_config")
    @classmethod
    def _override_is_mapping(cls, value: dict[str, Any]) -> dict[str, Any]:
        override = value.get("override_neuron_config")
        if override is not None and not isinstance(override, dict):
            raise ValueError("override_neuron_config must be a mapping")
        return value

    @model_validator(mode="after")
    def _block_fits_context(self) -> "ServerConfig":
        if self.block_size > self.max_model_len:
            raise ValueError(
                f"block_size ({self.block_size}) must not exceed max_model_len "
                f"({self.max_model_len})"
            )
        return self

    def kv_cache_settings(self) -> dict[str, Any]:
        """vLLM KV-cache settings implied by ``block_size``.

        ``block_size == max_model_len`` means one block per sequence: the contiguous KV cache
        the Neuron plugin uses without prefix caching, where it needs exactly ``max_num_seqs``
        blocks (``num_gpu_blocks_override``). vLLM turns prefix caching on by default, which
        would make the plugin compile a block-KV model instead, so it is switched off here to
        match artifacts compiled for the contiguous layout. A smaller ``block_size`` asks for
        the paged, block-KV layout with prefix caching.
        """
        if self.block_size == self.max_model_len:
            return {"enable_prefix_caching": False, "num_gpu_blocks_override": self.max_num_seqs}
        return {"enable_prefix_caching": True}


# --------------------------------------------------------------------------------------------
# Engine interface and the vLLM adapter
# --------------------------------------------------------------------------------------------


class InvalidRequestError(ValueError):
    """The engine rejected a request as malformed; the server answers 400."""


@dataclass(frozen=True)
class SamplingOptions:
    """Sampling settings for one generation; ``None`` leaves the engine's default."""

    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class GenerationStep:
    """What one engine iteration added to a generation."""

    text: str
    """Text generated since the previous step."""
    completion_tokens: int
    """Tokens generated so far."""
    finish_reason: str | None
    """``stop``, ``length`` (or ``abort``) on the last step; ``None`` before it."""


class InferenceEngine(Protocol):
    """What the server needs from an engine; tests substitute an in-memory one."""

    async def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        """Tokenize ``text`` with the model's tokenizer."""
        ...

    async def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        """Render chat messages, with the generation prompt, using the model's template."""
        ...

    def generate(
        self, prompt_token_ids: list[int], options: SamplingOptions, request_id: str
    ) -> AsyncGenerator[GenerationStep, None]:
        """Start a generation. Raises :class:`InvalidRequestError` before returning when the
        options are unacceptable; closing the generator aborts the generation."""
        ...

    async def is_healthy(self) -> bool:
        """Whether the engine can still serve requests."""
        ...

    def shutdown(self) -> None:
        """Stop the engine and release its accelerator cores."""
        ...


EngineFactory = Callable[[ServerConfig], InferenceEngine]


class VLLMNeuronEngine:
    """The only code that touches vLLM, isolated so the rest is testable without it.

    It uses the part of vLLM's API that stayed stable across releases: ``AsyncEngineArgs``,
    ``AsyncLLMEngine.from_engine_args``, ``SamplingParams`` and ``generate`` yielding
    cumulative ``RequestOutput``s. Prompts are passed as token ids, so the server knows prompt
    lengths (for usage and context checks) before the engine sees a request.
    """

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._tokenizer: Any = None

    @classmethod
    def start(cls, config: ServerConfig) -> "VLLMNeuronEngine":
        """Create the engine; the Neuron plugin loads precompiled artifacts while this runs.

        No ``device`` argument: vLLM removed it, and the Neuron platform is discovered through
        the installed plugin. The KV-cache layout follows :meth:`ServerConfig.kv_cache_settings`.
        """
        from vllm import AsyncEngineArgs, AsyncLLMEngine

        # vLLM's Ray stat logger records the engine's metrics (queue, KV cache, TTFT, tokens)
        # as Ray metrics, which the node's metrics port exports as ray_vllm_*, as Ray Serve
        # LLM does on GPUs; vLLM's own Prometheus registry is served by no one in a replica.
        from vllm.v1.metrics.ray_wrappers import RayPrometheusStatLogger

        engine_args = AsyncEngineArgs(
            model=config.model,
            served_model_name=config.served_model_name,
            tensor_parallel_size=config.tensor_parallel_size,
            max_model_len=config.max_model_len,
            max_num_seqs=config.max_num_seqs,
            block_size=config.block_size,
            dtype=config.dtype,
            additional_config=dict(config.additional_config),
            **config.kv_cache_settings(),
        )
        return cls(
            AsyncLLMEngine.from_engine_args(engine_args, stat_loggers=[RayPrometheusStatLogger])
        )

    async def _get_tokenizer(self) -> Any:
        if self._tokenizer is None:
            tokenizer = self._engine.get_tokenizer()
            # A coroutine in older vLLM releases, a plain method in newer ones.
            if inspect.isawaitable(tokenizer):
                tokenizer = await tokenizer
            self._tokenizer = tokenizer
        return self._tokenizer

    async def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        tokenizer = await self._get_tokenizer()
        return [
            int(token) for token in tokenizer.encode(text, add_special_tokens=add_special_tokens)
        ]

    async def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        tokenizer = await self._get_tokenizer()
        try:
            rendered = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        except Exception as exc:
            # Templates reject conversations they cannot render (roles out of order, a model
            # without a template) with Jinja or value errors: the request cannot be served.
            raise InvalidRequestError(
                f"the model's chat template rejected the messages: {exc}"
            ) from exc
        return str(rendered)

    def generate(
        self, prompt_token_ids: list[int], options: SamplingOptions, request_id: str
    ) -> AsyncGenerator[GenerationStep, None]:
        from vllm import SamplingParams

        settings: dict[str, Any] = {"max_tokens": options.max_tokens}
        optional = {
            "temperature": options.temperature,
            "top_p": options.top_p,
            "presence_penalty": options.presence_penalty,
            "frequency_penalty": options.frequency_penalty,
            "seed": options.seed,
        }
        settings.update({name: value for name, value in optional.items() if value is not None})
        if options.stop:
            settings["stop"] = list(options.stop)
        # Built before the stream starts so invalid settings become a 400, not a broken stream.
        try:
            params = SamplingParams(**settings)
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc
        return self._steps(prompt_token_ids, params, request_id)

    async def _steps(
        self, prompt_token_ids: list[int], params: Any, request_id: str
    ) -> AsyncGenerator[GenerationStep, None]:
        sent = 0
        outputs = self._engine.generate({"prompt_token_ids": prompt_token_ids}, params, request_id)
        # Closing vLLM's generator is what aborts the request inside the engine, so it must be
        # closed when this stream is (client disconnects, errors), not when it is collected.
        async with contextlib.aclosing(outputs):
            async for request_output in outputs:
                completion = request_output.outputs[0]
                text: str = completion.text
                yield GenerationStep(
                    text=text[sent:],
                    completion_tokens=len(completion.token_ids),
                    finish_reason=completion.finish_reason,
                )
                sent = len(text)

    async def is_healthy(self) -> bool:
        try:
            await self._engine.check_health()
        except Exception:
            logger.exception("vLLM engine health check failed")
            return False
        return True

    def shutdown(self) -> None:
        self._engine.shutdown()


def neuron_core_list(core_ids: Sequence[str]) -> str:
    """Format core ids for ``NEURON_RT_VISIBLE_CORES``: a range when contiguous (``4-7``),
    else a comma-separated list, which the Neuron runtime also accepts."""
    cores = sorted(int(core) for core in core_ids)
    if not cores:
        raise ValueError("no NeuronCores to format")
    if cores == list(range(cores[0], cores[-1] + 1)):
        return str(cores[0]) if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"
    return ",".join(str(core) for core in cores)


def pin_neuron_cores(tensor_parallel_size: int) -> str:
    """Restrict this process to the NeuronCores Ray assigned to the replica.

    Replicas sharing a node must not see each other's cores: the Neuron runtime would otherwise
    start on the first free cores it finds, not the ones Ray accounted for. Ray usually sets the
    variable itself, but not when ``RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES`` is set, so
    it is set here explicitly before the engine (and its engine-core subprocess) starts.
    """
    assigned = ray.get_runtime_context().get_accelerator_ids().get("neuron_cores", [])
    if not assigned:
        raise RuntimeError(
            "Ray assigned no neuron_cores to this replica: set "
            "ray_actor_options.resources.neuron_cores for NeuronLLMServer in the Serve config"
        )
    if len(assigned) < tensor_parallel_size:
        raise RuntimeError(
            f"tensor_parallel_size is {tensor_parallel_size} but Ray assigned only "
            f"{len(assigned)} neuron_cores ({', '.join(assigned)}) to this replica"
        )
    if len(assigned) > tensor_parallel_size:
        logger.warning(
            "Ray assigned %d neuron_cores for tensor_parallel_size %d; the extra cores stay idle",
            len(assigned),
            tensor_parallel_size,
        )
    visible = neuron_core_list(assigned)
    os.environ["NEURON_RT_VISIBLE_CORES"] = visible
    return visible


def start_vllm_neuron_engine(config: ServerConfig) -> InferenceEngine:
    """The production engine factory: pin cores, then start vLLM with the Neuron plugin."""
    visible = pin_neuron_cores(config.tensor_parallel_size)
    artifacts = os.environ.get("NEURON_COMPILED_ARTIFACTS")
    if artifacts:
        logger.info("Loading %s on NeuronCores %s from %s", config.model, visible, artifacts)
    else:
        # Without it the plugin compiles (minutes) and writes into the model directory, which
        # is read-only when the weights come from a Mountpoint volume.
        logger.warning(
            "NEURON_COMPILED_ARTIFACTS is not set: the Neuron plugin will compile %s at start-up",
            config.model,
        )
    return VLLMNeuronEngine.start(config)


# --------------------------------------------------------------------------------------------
# OpenAI request schemas
# --------------------------------------------------------------------------------------------


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    include_usage: bool = False


class _GenerationRequest(BaseModel):
    """Fields common to completions and chat completions.

    Unknown fields are ignored, as OpenAI clients send extras (``user``, metadata); fields
    that would change the answer but are not implemented are listed in ``UNSUPPORTED`` with
    the values that mean "not requested", and any other value is rejected.
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    UNSUPPORTED: ClassVar[dict[str, tuple[object, ...]]] = {
        "logit_bias": (None, {}),
        "best_of": (None, 1),
    }

    model: str | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None

    @field_validator("n")
    @classmethod
    def _single_choice(cls, value: int) -> int:
        if value != 1:
            raise ValueError("only n=1 is supported")
        return value

    @field_validator("stop")
    @classmethod
    def _non_empty_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if any(not stop for stop in stops):
            raise ValueError("stop sequences must be non-empty strings")
        return value

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> "_GenerationRequest":
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when stream is true")
        return self

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens


class CompletionRequest(_GenerationRequest):
    """``POST /v1/completions``. Token-id prompts are not accepted."""

    UNSUPPORTED: ClassVar[dict[str, tuple[object, ...]]] = {
        **_GenerationRequest.UNSUPPORTED,
        "logprobs": (None,),
        "echo": (None, False),
        "suffix": (None, ""),
    }

    prompt: str | list[str]

    @field_validator("prompt", mode="before")
    @classmethod
    def _text_prompts(cls, value: object) -> object:
        if isinstance(value, str):
            prompts: list[object] = [value]
        elif isinstance(value, list) and value:
            prompts = value
        else:
            raise ValueError("prompt must be a string or a non-empty list of strings")
        if not all(isinstance(prompt, str) and prompt for prompt in prompts):
            raise ValueError(
                "prompts must be non-empty strings (token-id prompts are not supported)"
            )
        return value

    @property
    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "developer", "user", "assistant"]
    content: str = ""

    @field_validator("content", mode="before")
    @classmethod
    def _flatten_text_parts(cls, value: object) -> object:
        """Accept OpenAI's list-of-parts form when every part is text."""
        if value is None:
            return ""
        if not isinstance(value, list):
            return value
        texts = []
        for part in value:
            if not (isinstance(part, dict) and part.get("type") == "text"):
                raise ValueError("only text content parts are supported")
            text = part.get("text")
            if not isinstance(text, str):
                raise ValueError("a text content part needs a string 'text'")
            texts.append(text)
        return "\n".join(texts)


class ChatCompletionRequest(_GenerationRequest):
    """``POST /v1/chat/completions``."""

    UNSUPPORTED: ClassVar[dict[str, tuple[object, ...]]] = {
        **_GenerationRequest.UNSUPPORTED,
        "logprobs": (None, False),
        "top_logprobs": (None, 0),
        "tools": (None, []),
        "functions": (None, []),
        "response_format": (None, {"type": "text"}),
    }

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, gt=0)

    def requested_max_tokens(self) -> int | None:
        # OpenAI deprecated max_tokens for chat in favour of max_completion_tokens.
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens


# --------------------------------------------------------------------------------------------
# The OpenAI-compatible server
# --------------------------------------------------------------------------------------------


class APIError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {message, type, param, code}}``."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.error_type = error_type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status_code)


def _validation_error(exc: ValidationError) -> APIError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    param = ".".join(str(part) for part in first["loc"]) or None
    reason = str(first["msg"]).removeprefix("Value error, ")
    message = f"{param}: {reason}" if param else reason
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem(s))"
    return APIError(400, message, param=param)


RequestT = TypeVar("RequestT", bound=_GenerationRequest)


def _parse_request(raw: bytes, schema: type[RequestT]) -> RequestT:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    for name, not_requested in schema.UNSUPPORTED.items():
        if name in data and data[name] not in not_requested:
            raise APIError(400, f"{name} is not supported by this server", param=name)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


_SSE_DONE = "data: [DONE]\n\n"


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


async def _cancel_all(tasks: Sequence["asyncio.Task[None]"]) -> None:
    for task in tasks:
        task.cancel()
    # Cancelled first, awaited second: if this await is itself cancelled (the client left), the
    # tasks still unwind and abort their generations.
    await asyncio.gather(*tasks, return_exceptions=True)


async def _interleave(
    streams: Sequence[AsyncGenerator[GenerationStep, None]],
) -> AsyncGenerator[tuple[int, GenerationStep], None]:
    """Yield ``(index, step)`` from several generations in the order steps arrive, so a
    multi-prompt completion streams as fast as its fastest prompt."""
    if len(streams) == 1:
        async with contextlib.aclosing(streams[0]) as stream:
            async for step in stream:
                yield 0, step
        return

    queue: asyncio.Queue[tuple[int, GenerationStep | Exception | None]] = asyncio.Queue()

    async def pump(index: int, stream: AsyncGenerator[GenerationStep, None]) -> None:
        try:
            async with contextlib.aclosing(stream):
                async for step in stream:
                    await queue.put((index, step))
        except Exception as exc:
            await queue.put((index, exc))
        else:
            await queue.put((index, None))

    tasks = [asyncio.create_task(pump(index, stream)) for index, stream in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        await _cancel_all(tasks)


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
            title="neuron_app",
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
        app.add_exception_handler(APIError, _api_error_response)
        # Unknown routes and wrong methods answer in the same error shape as everything else.
        app.add_exception_handler(StarletteHTTPException, _http_error_response)
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
        body = _parse_request(await request.body(), CompletionRequest)
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
            return StreamingResponse(events, media_type="text/event-stream", headers=_SSE_HEADERS)
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
        body = _parse_request(await request.body(), ChatCompletionRequest)
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
            return StreamingResponse(events, media_type="text/event-stream", headers=_SSE_HEADERS)
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
        body: _GenerationRequest,
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
            async with contextlib.aclosing(_interleave(streams)) as steps:
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
            async with contextlib.aclosing(_interleave(streams)) as steps:
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
                    yield _sse({**header, "choices": [choice], **usage_field})
            if include_usage:
                usage = _usage(prompt_tokens, sum(completion_tokens))
                yield _sse({**header, "choices": [], "usage": usage})
        except Exception as exc:
            yield _sse((await self._failure(exc)).body())
        yield _SSE_DONE

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
            return _sse({**header, "choices": [choice], **usage_field})

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
                yield _sse({**header, "choices": [], "usage": usage})
        except Exception as exc:
            yield _sse((await self._failure(exc)).body())
        yield _SSE_DONE


async def _api_error_response(_: Request, exc: Exception) -> Response:
    if not isinstance(exc, APIError):
        raise exc
    return exc.response()


async def _http_error_response(_: Request, exc: Exception) -> Response:
    if not isinstance(exc, StarletteHTTPException):
        raise exc
    error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    error = APIError(exc.status_code, str(exc.detail), error_type=error_type)
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)


# --------------------------------------------------------------------------------------------
# Ray Serve deployment and application builder
# --------------------------------------------------------------------------------------------


@serve.deployment(name="NeuronLLMServer")
@serve.ingress()
class NeuronLLMServer:
    """One replica: one vLLM engine on the NeuronCores Ray assigned to it.

    The FastAPI app is built per replica (``__serve_build_asgi_app__``) with routes bound to
    this replica's engine, so request handling never depends on Ray's replica context and the
    same :class:`OpenAIServer` runs unchanged under test.
    """

    def __init__(
        self, config: ServerConfig, engine_factory: EngineFactory = start_vllm_neuron_engine
    ) -> None:
        # Read before the engine starts: a replica without its key fails in seconds, not after
        # minutes of loading the model.
        api_key = (
            api_key_from_environment(config.api_key_env) if config.api_key_env is not None else None
        )
        self._server = OpenAIServer(config, engine_factory(config), api_key)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return self._server.asgi_app()

    async def check_health(self) -> None:
        """Called periodically by Ray Serve; raising makes Serve replace the replica."""
        if not await self._server.engine.is_healthy():
            raise RuntimeError("the vLLM engine of this replica is not running")

    def __del__(self) -> None:
        # Called by Serve on graceful shutdown: stopping the engine frees the NeuronCores for
        # the replica that replaces this one instead of waiting for the process to exit.
        server: OpenAIServer | None = getattr(self, "_server", None)
        if server is not None:
            server.engine.shutdown()


def build_app(args: dict[str, Any]) -> serve.Application:
    """Serve import target (``neuron_app:build_app``): validate ``args`` and bind the deployment.

    Raises ``ValueError`` naming every invalid or missing key, on the Ray head, before any
    replica is scheduled on an Inferentia node.
    """
    try:
        config = ServerConfig.model_validate(args)
    except ValidationError as exc:
        raise ValueError(f"invalid args for neuron_app:build_app: {exc}") from exc
    # mypy does not apply class decorators: it sees the class where Ray made a Deployment.
    deployment = cast(serve.Deployment, NeuronLLMServer)
    return deployment.bind(config)


def api_key_ingress(base: type[Any], api_key_env: str) -> type[Any]:
    """A subclass of Ray Serve LLM's ingress ``base`` whose ASGI app is behind the API-key check.

    Serve wraps an ingress class and hands the replica's ASGI app to ``_set_asgi_app`` when the
    replica starts; the subclass adds :class:`APIKeyMiddleware` to that app as its outermost
    middleware, with the key read from ``api_key_env`` there, in the replica, so the key never
    travels in the Serve config. The app stays the one Serve was given rather than being
    wrapped: Serve then adds its handlers to it, which answer back-pressure with 503 and
    ``Retry-After`` and a failed deployment with 503 (a wrapper without ``add_exception_handler``
    would leave both to Ray Serve LLM's last-resort handler, which drops the header and makes
    the second a 500).
    """

    def _set_asgi_app(self: Any, app: FastAPI) -> None:
        app.add_middleware(APIKeyMiddleware, api_key=api_key_from_environment(api_key_env))
        super(ingress, self)._set_asgi_app(app)

    ingress: type[Any] = type(f"APIKey{base.__name__}", (base,), {"_set_asgi_app": _set_asgi_app})
    return ingress


def build_ray_llm_app(args: dict[str, Any]) -> serve.Application:
    """Serve import target (``neuron_app:build_ray_llm_app``) for GPU RayServices with a key.

    ``args`` are Ray Serve LLM's ``build_openai_app`` arguments plus ``api_key_env``; the
    application is Ray Serve LLM's own, with its ingress made by :func:`api_key_ingress`. Ray
    Serve LLM is imported here, on the Ray head and GPU workers that have it, never when the
    module is.
    """
    options = dict(args)
    api_key_env = options.pop("api_key_env", None)
    if not isinstance(api_key_env, str) or not re.fullmatch(_ENV_NAME_PATTERN, api_key_env):
        raise ValueError(
            "invalid args for neuron_app:build_ray_llm_app: api_key_env must name an "
            f"environment variable, got {api_key_env!r}"
        )
    if "ingress_cls_config" in options:
        raise ValueError(
            "invalid args for neuron_app:build_ray_llm_app: ingress_cls_config is set by the "
            "builder (the ingress behind the API-key check)"
        )
    from ray.serve.llm import build_openai_app
    from ray.serve.llm.ingress import OpenAiIngress

    ingress = api_key_ingress(OpenAiIngress, api_key_env)
    application: serve.Application = build_openai_app(
        {**options, "ingress_cls_config": {"ingress_cls": ingress}}
    )
    return application
