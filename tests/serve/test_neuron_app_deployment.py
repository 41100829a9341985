"""``neuron_app``'s contract with the chart (``build_app`` args, the ``NeuronLLMServer``
deployment), NeuronCore pinning, and the vLLM adapter against a stand-in ``vllm`` module that
mirrors the API surface the adapter relies on."""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import sys
import types
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import ray
from ray import serve
from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

from eks_inference.serve import neuron_app
from eks_inference.serve.neuron_app import (
    GenerationStep,
    InvalidRequestError,
    SamplingOptions,
    ServerConfig,
    VLLMNeuronEngine,
    build_app,
    neuron_core_list,
    pin_neuron_cores,
    start_vllm_neuron_engine,
)
from tests.serve.fakes import FakeEngine, call_app

# mypy does not apply class decorators; at run time the class is a Serve Deployment.
DEPLOYMENT = cast(serve.Deployment, neuron_app.NeuronLLMServer)

ARGS: dict[str, Any] = {
    "model": "/models/llama-3-8b",
    "served_model_name": "llama-3-8b",
    "tensor_parallel_size": 2,
    "max_model_len": 4096,
    "max_num_seqs": 8,
    "block_size": 32,
    "dtype": "bfloat16",
    "additional_config": {"override_neuron_config": {"enable_bucketing": True}},
}


# -- build_app -------------------------------------------------------------------------------


def test_build_app_binds_the_neuron_llm_server_deployment() -> None:
    app = build_app(dict(ARGS))
    assert isinstance(app, serve.Application)
    assert DEPLOYMENT.name == "NeuronLLMServer"


def test_ray_serve_accepts_build_app_as_an_application_builder() -> None:
    assert isinstance(build_app, types.FunctionType)
    app = call_user_app_builder_with_args_if_necessary(build_app, dict(ARGS))
    assert isinstance(app, serve.Application)


def test_deployment_options_are_left_to_the_serve_config() -> None:
    tree = ast.parse(Path(neuron_app.__file__).read_text())
    (server,) = [
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "NeuronLLMServer"
    ]
    deployment_calls = [
        d
        for d in server.decorator_list
        if isinstance(d, ast.Call)
        and isinstance(d.func, ast.Attribute)
        and d.func.attr == "deployment"
    ]
    (call,) = deployment_calls
    assert [k.arg for k in call.keywords] == ["name"]
    assert not call.args


@pytest.mark.parametrize("missing", sorted(ARGS))
def test_build_app_requires_every_key(missing: str) -> None:
    args = {k: v for k, v in ARGS.items() if k != missing}
    with pytest.raises(ValueError, match=missing):
        build_app(args)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"device": "neuron"}, "device"),
        ({"tensor_parallel_size": "2"}, "tensor_parallel_size"),
        ({"tensor_parallel_size": True}, "tensor_parallel_size"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"max_model_len": -1}, "max_model_len"),
        ({"max_num_seqs": 2.0}, "max_num_seqs"),
        ({"block_size": 0}, "block_size"),
        ({"block_size": 8192}, "block_size"),
        ({"dtype": "fp8"}, "dtype"),
        ({"dtype": "auto"}, "dtype"),
        ({"dtype": None}, "dtype"),
        ({"model": ""}, "model"),
        ({"served_model_name": None}, "served_model_name"),
        ({"additional_config": []}, "additional_config"),
        ({"additional_config": {"override_neuron_config": "tp=2"}}, "override_neuron_config"),
    ],
)
def test_build_app_rejects_invalid_args_naming_the_key(change: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match="invalid args for neuron_app:build_app") as caught:
        build_app({**ARGS, **change})
    assert named in str(caught.value)


def test_build_app_rejects_args_that_are_not_a_mapping() -> None:
    with pytest.raises(ValueError, match="invalid args"):
        build_app([("model", "/m")])  # type: ignore[arg-type]


def test_additional_config_without_overrides_is_accepted() -> None:
    assert ServerConfig.model_validate({**ARGS, "additional_config": {}}).additional_config == {}


# -- the deployment under Ray's ingress wrapper ----------------------------------------------

# Ray's ingress wrapper defines ``async def __del__`` for Serve to await on shutdown; when the
# interpreter frees a replica built here, it calls it without awaiting and Python warns.
_UNAWAITED_DEL = pytest.mark.filterwarnings(
    "ignore:coroutine '.*ASGIIngressWrapper.__del__' was never awaited:RuntimeWarning"
)


async def _replica(engine: FakeEngine) -> Any:
    """Construct the deployment's class the way a Serve replica does, without a cluster."""
    # Serve's ingress wrapper: a class whose ``__init__`` is a coroutine function.
    cls: Any = DEPLOYMENT.func_or_class
    replica = cls.__new__(cls)
    await cls.__init__(replica, ServerConfig.model_validate(ARGS), lambda _config: engine)
    return replica


@_UNAWAITED_DEL
def test_replica_builds_an_app_bound_to_its_engine() -> None:
    engine = FakeEngine()

    async def scenario() -> tuple[str, str]:
        replica = await _replica(engine)
        app = replica.__serve_build_asgi_app__()
        models = await call_app(app, "GET", "/v1/models")
        completion = await call_app(
            app, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}
        )
        return models.json()["data"][0]["id"], completion.json()["choices"][0]["text"]

    assert asyncio.run(scenario()) == ("llama-3-8b", "Hello there")


@_UNAWAITED_DEL
def test_replica_health_check_fails_when_the_engine_died() -> None:
    engine = FakeEngine()

    async def scenario() -> None:
        replica = await _replica(engine)
        await replica.check_health()
        engine.healthy = False
        with pytest.raises(RuntimeError, match="not running"):
            await replica.check_health()

    asyncio.run(scenario())


@_UNAWAITED_DEL
def test_replica_shutdown_stops_the_engine() -> None:
    engine = FakeEngine()

    async def scenario() -> None:
        replica = await _replica(engine)
        await replica.__del__()

    asyncio.run(scenario())
    assert engine.shut_down


# -- NeuronCore pinning ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "visible"),
    [
        (["0"], "0"),
        (["0", "1"], "0-1"),
        (["6", "4", "7", "5"], "4-7"),
        (["1", "3"], "1,3"),
        (["10", "9", "12"], "9,10,12"),
    ],
)
def test_neuron_core_list(ids: list[str], visible: str) -> None:
    assert neuron_core_list(ids) == visible


def test_neuron_core_list_needs_cores() -> None:
    with pytest.raises(ValueError, match="no NeuronCores"):
        neuron_core_list([])


@dataclass
class FakeRuntimeContext:
    neuron_cores: list[str]

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        return {"GPU": [], "neuron_cores": self.neuron_cores}


@pytest.fixture
def assigned_cores(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The cores Ray assigns to the replica; the environment is restored afterwards."""
    cores: list[str] = []
    monkeypatch.setattr(ray, "get_runtime_context", lambda: FakeRuntimeContext(cores))
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "restored-after-test")
    return cores


def test_pin_neuron_cores_exports_the_assigned_cores(assigned_cores: list[str]) -> None:
    assigned_cores.extend(["8", "9", "10", "11"])
    assert pin_neuron_cores(4) == "8-11"
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "8-11"


def test_pin_neuron_cores_requires_neuron_cores_from_ray(assigned_cores: list[str]) -> None:
    with pytest.raises(RuntimeError, match=r"ray_actor_options\.resources\.neuron_cores"):
        pin_neuron_cores(2)


def test_pin_neuron_cores_requires_enough_cores_for_tensor_parallelism(
    assigned_cores: list[str],
) -> None:
    assigned_cores.extend(["0", "1"])
    with pytest.raises(RuntimeError, match="tensor_parallel_size is 4"):
        pin_neuron_cores(4)


# -- the vLLM adapter ------------------------------------------------------------------------


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
        for name, member in inspect.getmembers(neuron_app.InferenceEngine)
        if not name.startswith("_") and callable(member)
    }
    assert interface == {"encode", "apply_chat_template", "generate", "is_healthy", "shutdown"}
    for name in interface:
        adapter = getattr(VLLMNeuronEngine, name)
        expected = getattr(neuron_app.InferenceEngine, name)
        assert inspect.iscoroutinefunction(adapter) == inspect.iscoroutinefunction(expected), name
        assert inspect.signature(adapter) == inspect.signature(expected), name
