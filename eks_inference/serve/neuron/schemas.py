"""The OpenAI request bodies this server accepts, and how a raw body is parsed into one.

Parsing answers every malformed or unsupported request with a 400 in OpenAI's error shape
(:class:`.errors.APIError`) before any engine work starts.
"""

import json
from typing import ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import APIError


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    include_usage: bool = False


class GenerationRequest(BaseModel):
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
    def _stream_options_need_stream(self) -> "GenerationRequest":
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


class CompletionRequest(GenerationRequest):
    """``POST /v1/completions``. Token-id prompts are not accepted."""

    UNSUPPORTED: ClassVar[dict[str, tuple[object, ...]]] = {
        **GenerationRequest.UNSUPPORTED,
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


class ChatCompletionRequest(GenerationRequest):
    """``POST /v1/chat/completions``."""

    UNSUPPORTED: ClassVar[dict[str, tuple[object, ...]]] = {
        **GenerationRequest.UNSUPPORTED,
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


def _validation_error(exc: ValidationError) -> APIError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    param = ".".join(str(part) for part in first["loc"]) or None
    reason = str(first["msg"]).removeprefix("Value error, ")
    message = f"{param}: {reason}" if param else reason
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem(s))"
    return APIError(400, message, param=param)


RequestT = TypeVar("RequestT", bound=GenerationRequest)


def parse_request(raw: bytes, schema: type[RequestT]) -> RequestT:
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
