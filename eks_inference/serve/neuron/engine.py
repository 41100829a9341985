"""What the server needs from an inference engine, and the types the two exchange.

The server (:mod:`.server`) depends only on :class:`InferenceEngine`, so the whole request
path runs under test with an in-memory engine; :mod:`.vllm_engine` is the production one.
"""

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Protocol

from .config import ServerConfig


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
