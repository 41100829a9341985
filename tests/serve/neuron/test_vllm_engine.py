"""The vLLM adapter against a stand-in ``vllm`` module that mirrors the API surface the adapter
relies on, the production engine factory, and the adapter's fit to the engine interface."""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
import types
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import pytest

from eks_inference.serve.neuron.config import ServerConfig
from eks_inference.serve.neuron.engine import (
    GenerationStep,
    InferenceEngine,
    InvalidRequestError,
    SamplingOptions,
)
from eks_inference.serve.neuron.vllm_engine import VLLMNeuronEngine, start_vllm_neuron_engine
from tests.helpers.serve_fakes import APP_ARGS as ARGS


@dataclass
class FakeCompletionOutput:
    text: str
    token_ids: list[int]
    finish_reason: str | None


@dataclass
class FakeRequestOutput:
    outputs: list[FakeCompletionOutput]


@dataclass
class FakeTokenizer:
    template_error: Exception | None = None
    chat_calls: list[dict[str, Any]] = field(default_factory=list)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [ord(c) for c in text]
        return [1, *ids] if add_special_tokens else ids

    def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        self.chat_calls.append(kwargs)
        if self.template_error is not None:
            raise self.template_error
        return "|".join(m["content"] for m in messages)


@dataclass
class FakeAsyncLLM:
    """Mirrors vLLM's AsyncLLM: cumulative outputs; closing ``generate`` aborts."""

    cumulative: tuple[str, ...] = ("Hel", "Hello", "Hello world")
    tokenizer: FakeTokenizer = field(default_factory=FakeTokenizer)
    async_tokenizer: bool = False
    dead: bool = False
    generate_calls: list[tuple[Any, Any, str]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    tokenizer_fetches: int = 0
    shut_down: bool = False
    env_at_start: str | None = None

    async def generate(
        self, prompt: Any, params: Any, request_id: str
    ) -> AsyncGenerator[FakeRequestOutput, None]:
        self.generate_calls.append((prompt, params, request_id))
        try:
            for index, text in enumerate(self.cumulative, start=1):
                last = index == len(self.cumulative)
                yield FakeRequestOutput(
                    [FakeCompletionOutput(text, list(range(index)), "stop" if last else None)]
                )
        except GeneratorExit:
            self.aborted.append(request_id)
            raise

    def get_tokenizer(self) -> Any:
        self.tokenizer_fetches += 1
        if self.async_tokenizer:

            async def fetch() -> FakeTokenizer:
                return self.tokenizer

            return fetch()
        return self.tokenizer

    async def check_health(self) -> None:
        if self.dead:
            raise RuntimeError("EngineDeadError")

    def shutdown(self) -> None:
        self.shut_down = True


@dataclass
class FakeVLLM:
    """A stand-in ``vllm`` module recording how the adapter uses it."""

    engine: FakeAsyncLLM = field(default_factory=FakeAsyncLLM)
    engine_args: dict[str, Any] | None = None
    stat_loggers: list[Any] | None = None

    def module(self) -> types.ModuleType:
        recorder = self

        class AsyncEngineArgs:
            def __init__(self, **kwargs: Any) -> None:
                recorder.engine_args = kwargs

        class AsyncLLMEngine:
            @classmethod
            def from_engine_args(
                cls, engine_args: AsyncEngineArgs, stat_loggers: list[Any] | None = None
            ) -> FakeAsyncLLM:
                recorder.engine.env_at_start = os.environ.get("NEURON_RT_VISIBLE_CORES")
                recorder.stat_loggers = stat_loggers
                return recorder.engine

        class SamplingParams:
            def __init__(self, **kwargs: Any) -> None:
                if kwargs.get("top_p", 1.0) <= 0:
                    raise ValueError("top_p must be in (0, 1], got 0.")
                self.kwargs = kwargs

        module = types.ModuleType("vllm")
        module.AsyncEngineArgs = AsyncEngineArgs  # type: ignore[attr-defined]
        module.AsyncLLMEngine = AsyncLLMEngine  # type: ignore[attr-defined]
        module.SamplingParams = SamplingParams  # type: ignore[attr-defined]
        return module


class RayPrometheusStatLogger:
    """Stands in for vllm.v1.metrics.ray_wrappers.RayPrometheusStatLogger."""


@pytest.fixture
def vllm(monkeypatch: pytest.MonkeyPatch) -> FakeVLLM:
    fake = FakeVLLM()
    monkeypatch.setitem(sys.modules, "vllm", fake.module())
    wrappers = types.ModuleType("vllm.v1.metrics.ray_wrappers")
    wrappers.RayPrometheusStatLogger = RayPrometheusStatLogger  # type: ignore[attr-defined]
    for name in ("vllm.v1", "vllm.v1.metrics"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.v1.metrics.ray_wrappers", wrappers)
    return fake


def _engine(vllm: FakeVLLM) -> VLLMNeuronEngine:
    return VLLMNeuronEngine.start(ServerConfig.model_validate(ARGS))


async def _collect(stream: AsyncGenerator[GenerationStep, None]) -> list[GenerationStep]:
    return [step async for step in stream]


def test_engine_args_are_the_contract_without_device(vllm: FakeVLLM) -> None:
    _engine(vllm)
    assert vllm.engine_args == {
        "model": "/models/llama-3-8b",
        "served_model_name": "llama-3-8b",
        "tensor_parallel_size": 2,
        "max_model_len": 4096,
        "max_num_seqs": 8,
        "block_size": 32,
        "dtype": "bfloat16",
        "additional_config": {"override_neuron_config": {"enable_bucketing": True}},
        "enable_prefix_caching": True,
    }


def test_engine_metrics_are_recorded_as_ray_metrics(vllm: FakeVLLM) -> None:
    """The engine's queue, KV-cache and latency metrics leave the replica as ray_vllm_*."""
    _engine(vllm)
    assert vllm.stat_loggers == [RayPrometheusStatLogger]


def test_one_block_per_sequence_selects_the_contiguous_kv_cache(vllm: FakeVLLM) -> None:
    VLLMNeuronEngine.start(ServerConfig.model_validate({**ARGS, "block_size": 4096}))
    assert vllm.engine_args is not None
    assert vllm.engine_args["block_size"] == 4096
    assert vllm.engine_args["enable_prefix_caching"] is False
    assert vllm.engine_args["num_gpu_blocks_override"] == 8
    assert "device" not in vllm.engine_args


def test_generation_turns_cumulative_outputs_into_deltas(vllm: FakeVLLM) -> None:
    engine = _engine(vllm)
    steps = asyncio.run(
        _collect(engine.generate([1, 2, 3], SamplingOptions(max_tokens=5), "req-1"))
    )
    assert steps == [
        GenerationStep("Hel", 1, None),
        GenerationStep("lo", 2, None),
        GenerationStep(" world", 3, "stop"),
    ]
    ((prompt, params, request_id),) = vllm.engine.generate_calls
    assert prompt == {"prompt_token_ids": [1, 2, 3]}
    assert request_id == "req-1"
    assert params.kwargs == {"max_tokens": 5}


def test_sampling_params_carry_only_what_was_set(vllm: FakeVLLM) -> None:
    engine = _engine(vllm)
    options = SamplingOptions(
        max_tokens=7,
        temperature=0.0,
        top_p=0.5,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        stop=("\n", "END"),
        seed=3,
    )
    asyncio.run(_collect(engine.generate([1], options, "req-2")))
    assert vllm.engine.generate_calls[0][1].kwargs == {
        "max_tokens": 7,
        "temperature": 0.0,
        "top_p": 0.5,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.2,
        "seed": 3,
        "stop": ["\n", "END"],
    }


def test_sampling_params_vllm_rejects_fail_before_the_stream_starts(vllm: FakeVLLM) -> None:
    engine = _engine(vllm)
    with pytest.raises(InvalidRequestError, match="top_p"):
        engine.generate([1], SamplingOptions(max_tokens=1, top_p=0.0), "req-3")
    assert not vllm.engine.generate_calls


def test_closing_the_stream_aborts_the_vllm_request(vllm: FakeVLLM) -> None:
    engine = _engine(vllm)

    async def first_step_only() -> None:
        stream = engine.generate([1], SamplingOptions(max_tokens=5), "req-4")
        await anext(stream)
        await stream.aclose()

    asyncio.run(first_step_only())
    assert vllm.engine.aborted == ["req-4"]


@pytest.mark.parametrize("async_tokenizer", [False, True])
def test_tokenizer_is_fetched_once_whether_sync_or_async(
    vllm: FakeVLLM, async_tokenizer: bool
) -> None:
    vllm.engine.async_tokenizer = async_tokenizer
    engine = _engine(vllm)

    async def scenario() -> tuple[list[int], list[int]]:
        return (
            await engine.encode("ab", add_special_tokens=True),
            await engine.encode("ab", add_special_tokens=False),
        )

    assert asyncio.run(scenario()) == ([1, 97, 98], [97, 98])
    assert vllm.engine.tokenizer_fetches == 1


def test_chat_template_renders_with_the_generation_prompt(vllm: FakeVLLM) -> None:
    engine = _engine(vllm)
    rendered = asyncio.run(engine.apply_chat_template([{"role": "user", "content": "hi"}]))
    assert rendered == "hi"
    assert vllm.engine.tokenizer.chat_calls == [{"tokenize": False, "add_generation_prompt": True}]


def test_chat_template_errors_are_invalid_requests(vllm: FakeVLLM) -> None:
    vllm.engine.tokenizer.template_error = ValueError("Conversation roles must alternate")
    engine = _engine(vllm)
    with pytest.raises(InvalidRequestError, match="roles must alternate"):
        asyncio.run(engine.apply_chat_template([{"role": "user", "content": "hi"}]))


def test_health_and_shutdown(vllm: FakeVLLM) -> None:
    engine = _engine(vllm)
    assert asyncio.run(engine.is_healthy())
    vllm.engine.dead = True
    assert not asyncio.run(engine.is_healthy())
    engine.shutdown()
    assert vllm.engine.shut_down


def test_production_factory_pins_cores_before_the_engine_starts(
    vllm: FakeVLLM, assigned_cores: list[str]
) -> None:
    assigned_cores.extend(["2", "3"])
    engine = start_vllm_neuron_engine(ServerConfig.model_validate(ARGS))
    assert isinstance(engine, VLLMNeuronEngine)
    assert vllm.engine.env_at_start == "2-3"


def test_the_adapter_satisfies_the_engine_interface() -> None:
    interface = {
        name
        for name, member in inspect.getmembers(InferenceEngine)
        if not name.startswith("_") and callable(member)
    }
    assert interface == {"encode", "apply_chat_template", "generate", "is_healthy", "shutdown"}
    for name in interface:
        adapter = getattr(VLLMNeuronEngine, name)
        expected = getattr(InferenceEngine, name)
        assert inspect.iscoroutinefunction(adapter) == inspect.iscoroutinefunction(expected), name
        assert inspect.signature(adapter) == inspect.signature(expected), name
