"""The Triton launcher: the API-key check in front of the frontend's app, and KServe's v2
inference route for the framework models, against a stand-in of the in-process server.

``BYTES`` tensors are checked against the pinned release's own HTTP client (tritonclient
2.63.0, Triton 25.11): it writes the request body a client sends as JSON and parses the
response, as it would from Triton's own HTTP frontend.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any

import numpy
import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from tritonclient.http import InferenceServerClient, InferInput, InferRequestedOutput

from eks_inference.charts.shipped import SHIPPED_PACKAGE
from eks_inference.engines.triton.engine import LAUNCHER_COMMAND, SHIPPED_MODULES
from eks_inference.serve.triton_openai import (
    INFER_PATH,
    READY_PATH,
    RequestError,
    ResponseError,
    TritonAPIKeyMiddleware,
    add_v2_inference,
    v2_inputs,
    v2_outputs,
)
from tests.helpers.serve_fakes import call_app

KEY = "test-key-123"


class _DataType:
    def __init__(self, name: str) -> None:
        self.name = name


class _Tensor:
    """The in-process API's Tensor as far as the launcher reads it: numeric ones through
    DLPack; BYTES ones held as Triton holds them (each element after its 4-byte length) and
    read back by ``to_bytes_array``, as core r25.11's ``_tensor.py`` does."""

    def __init__(self, array: Any) -> None:
        self.shape = array.shape
        if array.dtype == object:
            self.data_type = _DataType("BYTES")
            self._buffer = b"".join(struct.pack("@I", len(e)) + e for e in array.flatten())
        else:
            self.data_type = _DataType(str(array.dtype).upper())
            self._array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self._array.__dlpack_device__()

    def to_bytes_array(self) -> Any:
        elements, offset = [], 0
        while offset < len(self._buffer):
            (length,) = struct.unpack_from("@I", self._buffer, offset)
            elements.append(self._buffer[offset + 4 : offset + 4 + length])
            offset += 4 + length
        array = numpy.empty(len(elements), dtype=object)
        array[:] = elements
        return array.reshape(self.shape)


class _Response:
    def __init__(self, outputs: dict[str, Any]) -> None:
        self.outputs = {name: _Tensor(array) for name, array in outputs.items()}


class _Model:
    """The in-process API's Model: create_request, then async_infer yielding responses."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests: list[dict[str, Any]] = []

    def create_request(self, **kwargs: Any) -> dict[str, Any]:
        self.requests.append(kwargs)
        return kwargs

    async def async_infer(self, request: dict[str, Any]) -> AsyncIterator[_Response]:
        inputs = request["inputs"]
        if self.name == "embed":
            yield _Response({"embedding": numpy.asarray(inputs["input_ids"], dtype="float32") * 2})
            return
        # "label": upper-cases each text element and counts its bytes; "\xff" for "binary".
        text = inputs["text"]
        upper = numpy.empty(text.size, dtype=object)
        upper[:] = [b"\xff" if e == b"binary" else e.decode().upper().encode() for e in text.flat]
        lengths = numpy.asarray([len(e) for e in text.flat], dtype="int64")
        yield _Response({"upper": upper.reshape(text.shape), "length": lengths.reshape(text.shape)})


class _Server:
    def __init__(self) -> None:
        self.models = {"embed": _Model("embed"), "label": _Model("label")}

    def model(self, name: str) -> _Model:
        return self.models[name]


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
    add_v2_inference(frontend, server, ["embed", "label"])
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
    (request,) = server.models["embed"].requests
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
        ({"inputs": [{"name": "x", "shape": [1], "datatype": "BF16", "data": [1]}]}, "datatype"),
        ({"inputs": [{"name": "x", "shape": [-1], "datatype": "FP32", "data": [1]}]}, "shape"),
    ],
)
def test_v2_inputs_say_what_is_wrong(body: Any, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        v2_inputs(body)


def test_v2_outputs_refuse_types_the_protocol_lacks() -> None:
    with pytest.raises(ResponseError, match="not served"):
        v2_outputs("embed", {"when": numpy.asarray(["2025-11-01"], dtype="datetime64[D]")})


# -- BYTES tensors --------------------------------------------------------------------------


def _client_request(texts: Any) -> bytes:
    """The body the pinned client sends for a BYTES input in JSON, asking for JSON outputs."""
    text = InferInput("text", list(texts.shape), "BYTES")
    text.set_data_from_numpy(texts, binary_data=False)
    outputs = [InferRequestedOutput(name, binary_data=False) for name in ("upper", "length")]
    body, binary_length = InferenceServerClient.generate_request_body([text], outputs=outputs)
    assert binary_length is None  # the whole body is JSON
    encoded: bytes = body
    return encoded


def test_bytes_tensors_round_trip_with_the_pinned_client() -> None:
    app, server = _app()
    texts = numpy.asarray([["héllo", "wörld"], ["a", "日本"]], dtype=object)
    path = INFER_PATH.format(model="label")
    result = asyncio.run(
        call_app(
            app,
            "POST",
            path,
            raw_body=_client_request(texts),
            request_headers={"authorization": f"Bearer {KEY}"},
        )
    )
    assert result.status == 200, result.body
    parsed = InferenceServerClient.parse_response_body(result.body)
    upper = parsed.as_numpy("upper")
    assert upper.tolist() == [["HÉLLO", "WÖRLD"], ["A", "日本"]]
    assert parsed.as_numpy("length").tolist() == [[6, 6], [1, 6]]
    assert result.json()["outputs"][0]["datatype"] == "BYTES"
    # The model is given each element's UTF-8 bytes, in the request's shape.
    (request,) = server.models["label"].requests
    given = request["inputs"]["text"]
    assert given.dtype == object
    assert given.shape == (2, 2)
    assert given.tolist() == [[b"h\xc3\xa9llo", b"w\xc3\xb6rld"], [b"a", "日本".encode()]]


def test_a_nested_or_flat_bytes_input_takes_the_requests_shape() -> None:
    flat = {"inputs": [{"name": "t", "shape": [2, 1], "datatype": "BYTES", "data": ["a", "b"]}]}
    nested = {
        "inputs": [{"name": "t", "shape": [2, 1], "datatype": "BYTES", "data": [["a"], ["b"]]}]
    }
    for body in (flat, nested):
        array = v2_inputs(body)["t"]
        assert array.shape == (2, 1)
        assert array.tolist() == [[b"a"], [b"b"]]
    empty = {"inputs": [{"name": "t", "shape": [0], "datatype": "BYTES", "data": []}]}
    assert v2_inputs(empty)["t"].shape == (0,)


@pytest.mark.parametrize(
    ("data", "shape", "message"),
    [
        ([1, 2], [2], "BYTES data must be JSON strings"),
        (["a", "b", "c"], [2], "data does not fit shape \\[2\\]: 3 elements for 2"),
        ("ab", [1], "data must be a list of strings"),
        (["\ud800"], [1], "not UTF-8 text"),
    ],
)
def test_bad_bytes_inputs_say_what_is_wrong(data: Any, shape: list[int], message: str) -> None:
    body = {"inputs": [{"name": "t", "shape": shape, "datatype": "BYTES", "data": data}]}
    with pytest.raises(RequestError, match=message):
        v2_inputs(body)


def test_binary_tensor_data_is_refused_naming_json() -> None:
    app, _ = _app()
    path = INFER_PATH.format(model="label")
    texts = numpy.asarray(["a"], dtype=object)
    text = InferInput("text", [1], "BYTES")
    text.set_data_from_numpy(texts, binary_data=True)
    body, json_length = InferenceServerClient.generate_request_body([text])
    headers = {
        "authorization": f"Bearer {KEY}",
        "inference-header-content-length": str(json_length),
    }
    result = asyncio.run(call_app(app, "POST", path, raw_body=body, request_headers=headers))
    assert result.status == 400
    assert result.json() == {"error": "binary tensor data is not served; send the tensors as JSON"}
    marked = {
        "inputs": [
            {
                "name": "text",
                "shape": [1],
                "datatype": "BYTES",
                "parameters": {"binary_data_size": 5},
            }
        ]
    }
    result = _call(app, "POST", path, marked)
    assert result.status == 400
    assert "send it as JSON" in result.json()["error"]


def test_an_output_that_is_not_text_fails_rather_than_answer_invalid_json() -> None:
    app, _ = _app()
    body = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["binary"]}]}
    result = _call(app, "POST", INFER_PATH.format(model="label"), body)
    assert result.status == 500
    assert result.json() == {
        "error": "output upper holds an element that is not UTF-8 text, which a JSON response "
        "cannot carry"
    }
