"""The Triton launcher: the API-key check in front of the frontend's app, and KServe's v2
inference route for the framework models, against a stand-in of the in-process server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy
import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from eks_inference.charts.engines.triton import LAUNCHER_COMMAND, SHIPPED_MODULES
from eks_inference.charts.shipped import SHIPPED_PACKAGE
from eks_inference.serve.triton_openai import (
    INFER_PATH,
    READY_PATH,
    RequestError,
    TritonAPIKeyMiddleware,
    add_v2_inference,
    v2_inputs,
    v2_outputs,
)
from tests.serve.fakes import call_app

KEY = "test-key-123"


class _Response:
    def __init__(self, outputs: dict[str, Any]) -> None:
        self.outputs = outputs


class _Model:
    """The in-process API's Model: create_request, then async_infer yielding responses."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def create_request(self, **kwargs: Any) -> dict[str, Any]:
        self.requests.append(kwargs)
        return kwargs

    async def async_infer(self, request: dict[str, Any]) -> AsyncIterator[_Response]:
        ids = request["inputs"]["input_ids"]
        yield _Response({"embedding": numpy.asarray(ids, dtype="float32") * 2})


class _Server:
    def __init__(self) -> None:
        self.embed = _Model()

    def model(self, name: str) -> _Model:
        assert name == "embed"
        return self.embed


def _app() -> tuple[Any, _Server]:
    frontend = FastAPI()

    @frontend.get(READY_PATH)
    def ready() -> PlainTextResponse:
        return PlainTextResponse("")

    @frontend.get("/metrics")
    def metrics() -> PlainTextResponse:
        return PlainTextResponse("nv_inference_request_success 1\n")

    @frontend.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"data": [{"id": "qwen"}]}

    server = _Server()
    add_v2_inference(frontend, server, ["embed"])
    return TritonAPIKeyMiddleware(frontend, KEY), server


def _call(app: Any, method: str, path: str, payload: Any = None, key: str | None = KEY) -> Any:
    headers = {"authorization": f"Bearer {key}"} if key else None
    return asyncio.run(call_app(app, method, path, payload, request_headers=headers))


def test_the_launcher_runs_from_the_shipped_package() -> None:
    assert LAUNCHER_COMMAND[-1] == f"{SHIPPED_PACKAGE}.triton_openai"
    assert set(SHIPPED_MODULES) == {"__init__", "api_key_auth", "triton_openai"}


def test_only_readiness_and_metrics_are_open() -> None:
    app, _ = _app()
    assert _call(app, "GET", READY_PATH, key=None).status == 200
    assert _call(app, "GET", "/metrics", key=None).status == 200
    for path in ("/v1/models", "/v2/models/embed/infer", "/health", "/docs"):
        method = "POST" if path.endswith("infer") else "GET"
        assert _call(app, method, path, key=None).status == 401, path
        assert _call(app, method, path, key="wrong").status == 401, path
    assert _call(app, "GET", "/v1/models").status == 200


def test_v2_inference_runs_the_framework_model() -> None:
    app, server = _app()
    body = {
        "inputs": [{"name": "input_ids", "shape": [1, 3], "datatype": "INT64", "data": [1, 2, 3]}]
    }
    result = _call(app, "POST", INFER_PATH.format(model="embed"), body)
    assert result.status == 200
    assert result.json() == {
        "model_name": "embed",
        "outputs": [
            {"name": "embedding", "shape": [1, 3], "datatype": "FP32", "data": [2.0, 4.0, 6.0]}
        ],
    }
    (request,) = server.embed.requests
    assert request["output_memory_type"] == "cpu"
    assert request["inputs"]["input_ids"].dtype == numpy.int64


def test_v2_inference_refuses_other_models_and_bad_tensors() -> None:
    app, _ = _app()
    assert _call(app, "POST", INFER_PATH.format(model="qwen"), {"inputs": []}).status == 404
    bad = {"inputs": [{"name": "x", "shape": [2], "datatype": "INT64", "data": [1, 2, 3]}]}
    result = _call(app, "POST", INFER_PATH.format(model="embed"), bad)
    assert result.status == 400
    assert "does not fit shape [2]" in result.json()["error"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, "non-empty list 'inputs'"),
        ({"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}, "needs a name"),
        ({"inputs": [{"name": "x", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}, "datatype"),
        ({"inputs": [{"name": "x", "shape": [-1], "datatype": "FP32", "data": [1]}]}, "shape"),
    ],
)
def test_v2_inputs_say_what_is_wrong(body: Any, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        v2_inputs(body)


def test_v2_outputs_refuse_types_the_protocol_lacks() -> None:
    with pytest.raises(RequestError, match="not served"):
        v2_outputs("embed", {"text": numpy.asarray(["a"])})
