"""The API-key check of the Ray Serve applications: the Neuron server and, on GPUs, Ray Serve
LLM's application behind the same middleware. Driven with the in-memory engine and the ASGI
client of :mod:`tests.serve.fakes`; Ray Serve LLM (absent here) is a stand-in module, while
Serve's own ingress wrapper is the real one."""

from __future__ import annotations

import asyncio
import gc
import sys
import types
from collections.abc import Iterator
from typing import Any, cast

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from ray.serve._private.common import DeploymentID
from ray.serve._private.replica import UserCallableWrapper
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

from eks_inference.serve.api_key_auth import API_KEY_ENV
from eks_inference.serve.neuron.app import (
    NeuronLLMServer,
    api_key_ingress,
    build_app,
    build_ray_llm_app,
)
from eks_inference.serve.neuron.config import ServerConfig
from eks_inference.serve.neuron.server import OpenAIServer
from tests.helpers.serve_fakes import KEYED_CONFIG, FakeEngine, HTTPResult, call_app

KEY = "k3y-0f-the-platform"
CONFIG = KEYED_CONFIG
ARGS: dict[str, Any] = CONFIG.model_dump()
DEPLOYMENT = cast(serve.Deployment, NeuronLLMServer)
# Ray's ingress wrapper defines ``async def __del__``; a replica built here is freed without
# awaiting it, and Python warns, whenever the collector gets to it: in any test of the module.
pytestmark = pytest.mark.filterwarnings(
    "ignore:coroutine '.*ASGIIngressWrapper.__del__' was never awaited:RuntimeWarning"
)


@pytest.fixture
def collect_replicas() -> Iterator[None]:
    """Free this test's replicas while its warning filter applies, not in a later test."""
    yield
    gc.collect()


def request(
    app: Any, method: str, path: str, payload: Any = None, *, key: str | None = None
) -> HTTPResult:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return asyncio.run(call_app(app, method, path, payload, request_headers=headers))


def assert_unauthorized(result: HTTPResult) -> None:
    assert result.status == 401, result.body
    assert result.headers["www-authenticate"] == "Bearer"
    error = result.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "invalid_api_key"
    assert error["type"] == "invalid_request_error"


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def app(engine: FakeEngine) -> FastAPI:
    return OpenAIServer(CONFIG, engine, api_key=KEY).asgi_app()


# -- the Neuron server -----------------------------------------------------------------------

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("GET", "/v1/models", None),
        ("GET", "/v1/models/llama-3-8b", None),
        ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2}),
        ("POST", "/v1/chat/completions", CHAT),
        ("POST", "/v1/chat/completions", {**CHAT, "stream": True}),
        ("GET", "/v1/no-such-route", None),
        ("GET", "/no-such-route", None),
        ("OPTIONS", "/v1/chat/completions", None),
    ],
)
def test_every_route_but_health_rejects_a_request_without_the_key(
    app: FastAPI, engine: FakeEngine, method: str, path: str, payload: Any
) -> None:
    assert_unauthorized(request(app, method, path, payload))
    assert_unauthorized(request(app, method, path, payload, key="not-the-key"))
    assert engine.calls == []


def test_v1_routes_serve_a_request_with_the_key(app: FastAPI, engine: FakeEngine) -> None:
    models = request(app, "GET", "/v1/models", key=KEY)
    assert models.status == 200
    assert models.json()["data"][0]["id"] == "llama-3-8b"
    chat = request(app, "POST", "/v1/chat/completions", CHAT, key=KEY)
    assert chat.status == 200
    assert chat.json()["choices"][0]["message"]["content"] == "Hello there"
    stream = request(app, "POST", "/v1/chat/completions", {**CHAT, "stream": True}, key=KEY)
    assert stream.event_payloads()[-1]["choices"][0]["finish_reason"] == "length"
    assert len(engine.calls) == 2


def test_health_stays_open_for_probes_and_load_balancer_checks(app: FastAPI) -> None:
    assert request(app, "GET", "/health").status == 200


def test_without_a_key_nothing_is_checked(engine: FakeEngine) -> None:
    open_app = OpenAIServer(CONFIG, engine).asgi_app()
    assert request(open_app, "GET", "/v1/models").status == 200


# -- the replica reads the key from its environment ------------------------------------------


async def _replica(engine: FakeEngine, config: ServerConfig) -> Any:
    cls: Any = DEPLOYMENT.func_or_class
    replica = cls.__new__(cls)
    await cls.__init__(replica, config, lambda _config: engine)
    return replica


@pytest.mark.usefixtures("collect_replicas")
def test_the_replica_requires_the_key_from_its_environment(
    monkeypatch: pytest.MonkeyPatch, engine: FakeEngine
) -> None:
    monkeypatch.setenv(API_KEY_ENV, KEY)

    async def scenario() -> tuple[int, int]:
        replica = await _replica(engine, CONFIG)
        app = replica.__serve_build_asgi_app__()
        without = await call_app(app, "GET", "/v1/models")
        with_key = await call_app(
            app, "GET", "/v1/models", request_headers={"Authorization": f"Bearer {KEY}"}
        )
        return without.status, with_key.status

    assert asyncio.run(scenario()) == (401, 200)


@pytest.mark.parametrize("value", [None, ""])
@pytest.mark.usefixtures("collect_replicas")
def test_a_replica_without_its_key_fails_before_loading_the_model(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(API_KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(API_KEY_ENV, value)
    started: list[ServerConfig] = []

    def factory(config: ServerConfig) -> FakeEngine:
        started.append(config)
        return FakeEngine()

    async def scenario() -> None:
        cls: Any = DEPLOYMENT.func_or_class
        await cls.__init__(cls.__new__(cls), CONFIG, factory)

    with pytest.raises(RuntimeError, match=f"{API_KEY_ENV} is unset or empty"):
        asyncio.run(scenario())
    assert started == []


@pytest.mark.usefixtures("collect_replicas")
def test_build_app_takes_the_variable_name_never_the_key() -> None:
    assert isinstance(build_app(dict(ARGS)), serve.Application)
    with pytest.raises(ValueError, match="api_key_env"):
        build_app({**ARGS, "api_key_env": "not a variable"})


# -- Ray Serve LLM on GPUs, behind the same check --------------------------------------------


class StandInIngress:
    """Ray Serve LLM's ``OpenAiIngress`` as far as the wrapping relies on it: a plain class."""


@pytest.fixture
def ray_serve_llm(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Stand-in ``ray.serve.llm`` modules recording what ``build_openai_app`` was given."""
    built: list[dict[str, Any]] = []
    llm = types.ModuleType("ray.serve.llm")
    ingress = types.ModuleType("ray.serve.llm.ingress")

    def build_openai_app(config: dict[str, Any]) -> serve.Application:
        built.append(config)
        return cast(serve.Application, serve.Application)

    llm.build_openai_app = build_openai_app  # type: ignore[attr-defined]
    ingress.OpenAiIngress = StandInIngress  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ray.serve.llm", llm)
    monkeypatch.setitem(sys.modules, "ray.serve.llm.ingress", ingress)
    return built


def test_build_ray_llm_app_hands_ray_serve_llm_an_ingress_behind_the_check(
    ray_serve_llm: list[dict[str, Any]],
) -> None:
    llm_configs = [{"model_loading_config": {"model_id": "qwen", "model_source": "/mnt/model"}}]
    build_ray_llm_app({"llm_configs": llm_configs, "api_key_env": API_KEY_ENV})
    (config,) = ray_serve_llm
    assert config["llm_configs"] == llm_configs
    assert "api_key_env" not in config
    ingress = config["ingress_cls_config"]["ingress_cls"]
    assert issubclass(ingress, StandInIngress)
    assert "_set_asgi_app" in vars(ingress)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"llm_configs": []}, "api_key_env must name"),
        ({"llm_configs": [], "api_key_env": "lower-case"}, "api_key_env must name"),
        (
            {"llm_configs": [], "api_key_env": API_KEY_ENV, "ingress_cls_config": {}},
            "set by the builder",
        ),
    ],
)
def test_build_ray_llm_app_rejects_bad_args(
    ray_serve_llm: list[dict[str, Any]], args: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ValueError, match=expected):
        build_ray_llm_app(args)
    assert ray_serve_llm == []


def _models_app() -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "qwen"}]}

    return app


@pytest.mark.usefixtures("collect_replicas")
def test_serves_ingress_wrapper_puts_the_app_behind_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wrapper Serve builds around an ingress class (``serve.ingress(app)``, as Ray Serve
    LLM's ``make_fastapi_ingress`` does, on a subclass) hands the app to ``_set_asgi_app``."""
    monkeypatch.setenv(API_KEY_ENV, KEY)
    checked = api_key_ingress(StandInIngress, API_KEY_ENV)
    # make_fastapi_ingress subclasses the configured class before Serve wraps it.
    wrapped: Any = serve.ingress(_models_app())(type(checked.__name__, (checked,), {}))

    async def scenario() -> tuple[int, int]:
        replica = wrapped.__new__(wrapped)
        await wrapped.__init__(replica)
        without = await call_app(replica.app, "GET", "/v1/models")
        with_key = await call_app(
            replica.app, "GET", "/v1/models", request_headers={"Authorization": f"Bearer {KEY}"}
        )
        return without.status, with_key.status

    assert asyncio.run(scenario()) == (401, 200)


@pytest.mark.usefixtures("collect_replicas")
def test_the_gpu_ingress_fails_without_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    wrapped: Any = serve.ingress(_models_app())(api_key_ingress(StandInIngress, API_KEY_ENV))

    async def scenario() -> None:
        await wrapped.__init__(wrapped.__new__(wrapped))

    with pytest.raises(RuntimeError, match=API_KEY_ENV):
        asyncio.run(scenario())


class _StandInReplica:
    """What Serve's ``UserCallableWrapper._initialize_asgi_callable`` (Ray 2.60) reads of the
    replica it belongs to: the wrapped ingress and its own answers for unavailable deployments."""

    service_unavailable_exceptions = UserCallableWrapper.service_unavailable_exceptions
    handle_exception = UserCallableWrapper.handle_exception

    def __init__(self, ingress: Any) -> None:
        self._callable = ingress


def _unavailable_app() -> FastAPI:
    """An ingress app whose handlers meet Serve's unavailable deployments, behind a last-resort
    handler like Ray Serve LLM's (an exception's ``status_code``, else 500)."""
    app = FastAPI()

    @app.middleware("http")
    async def last_resort(request: Request, call_next: Any) -> Any:
        try:
            return await call_next(request)
        except Exception as exc:
            return JSONResponse({}, status_code=int(getattr(exc, "status_code", 500)))

    @app.post("/v1/chat/completions")
    async def shed() -> None:
        raise BackPressureError(num_queued_requests=4, max_queued_requests=4, retry_after_s=2)

    @app.post("/v1/completions")
    async def failed() -> None:
        raise DeploymentUnavailableError(DeploymentID(name="LLMServer", app_name="llm"))

    return app


@pytest.mark.usefixtures("collect_replicas")
def test_serves_unavailable_answers_pass_through_the_gpu_ingress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Serve answers a handler's back-pressure with its 503 and Retry-After, and a failed
    deployment with 503, through handlers it adds to the ingress app when the replica starts:
    the check must leave the app able to take them."""
    monkeypatch.setenv(API_KEY_ENV, KEY)
    wrapped: Any = serve.ingress(_unavailable_app())(api_key_ingress(StandInIngress, API_KEY_ENV))
    key = {"Authorization": f"Bearer {KEY}"}

    async def scenario() -> list[HTTPResult]:
        replica = wrapped.__new__(wrapped)
        await wrapped.__init__(replica)
        await UserCallableWrapper._initialize_asgi_callable(cast(Any, _StandInReplica(replica)))
        results = [
            await call_app(replica.app, "POST", path, {}, request_headers=headers)
            for path, headers in (
                ("/v1/chat/completions", key),
                ("/v1/completions", key),
                ("/v1/completions", {}),
            )
        ]
        await replica._serve_asgi_lifespan.shutdown()
        return results

    shed, failed, unauthorized = asyncio.run(scenario())
    assert (shed.status, shed.headers.get("retry-after")) == (503, "2")
    assert failed.status == 503
    assert_unauthorized(unauthorized)
