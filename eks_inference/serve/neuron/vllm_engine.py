"""The production engine: vLLM with the Neuron plugin, behind :class:`.engine.InferenceEngine`.

This is the only module that touches vLLM, and it imports vLLM inside functions only, so the
Ray head (which builds the application without vLLM) and unit tests import it without vLLM.
"""

import contextlib
import inspect
import logging
import os
from collections.abc import AsyncGenerator
from typing import Any

from .config import ServerConfig
from .cores import pin_neuron_cores
from .engine import GenerationStep, InferenceEngine, InvalidRequestError, SamplingOptions

# Ray Serve routes records of this logger into the replica's log files.
logger = logging.getLogger("ray.serve")


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
