"""The application's contract with the chart (``build_app`` args, the ``NeuronLLMServer``
deployment) and the deployment under Ray's ingress wrapper."""

from __future__ import annotations

import ast
import asyncio
import re
import types
from pathlib import Path
from typing import Any, cast

import pytest
from ray import serve
from ray.serve._private.api import call_user_app_builder_with_args_if_necessary

from eks_inference.serve.neuron import app as app_module
from eks_inference.serve.neuron.app import NeuronLLMServer, build_app
from eks_inference.serve.neuron.config import ServerConfig
from tests.helpers.serve_fakes import APP_ARGS as ARGS
from tests.helpers.serve_fakes import FakeEngine, call_app

# mypy does not apply class decorators; at run time the class is a Serve Deployment.
DEPLOYMENT = cast(serve.Deployment, NeuronLLMServer)


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
    tree = ast.parse(Path(app_module.__file__).read_text())
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
    invalid = re.escape(f"invalid args for {app_module.__name__}:build_app")
    with pytest.raises(ValueError, match=invalid) as caught:
        build_app({**ARGS, **change})
    assert named in str(caught.value)


def test_build_app_rejects_args_that_are_not_a_mapping() -> None:
    with pytest.raises(ValueError, match="invalid args"):
        build_app([("model", "/m")])  # type: ignore[arg-type]


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
