"""Triton with its OpenAI-compatible frontend, behind the platform's API-key check.

The pod of ``engine: triton`` runs this module (``python3 -m
eks_inference_serve.triton_openai``, shipped beside the check as the Ray pods get theirs) in
Triton's vLLM image. It does what the image's ``openai_frontend/main.py`` does (start the in-process
Triton server on the model repository, wrap it in the frontend's ``TritonLLMEngine`` and its
FastAPI app) and three things that script cannot:

* the app answers every path but the readiness path and ``/metrics`` only with
  ``Authorization: Bearer <key>`` (:class:`TritonAPIKeyMiddleware`), the key read from
  ``VLLM_API_KEY`` as on every engine, never from an argument: the frontend's own
  ``--openai-restricted-api`` would take the key in its command line;
* the framework models (ONNX Runtime, PyTorch), which the OpenAI routes do not serve, get
  KServe's v2 inference route ``POST /v2/models/<model>/infer`` (JSON tensors, numeric and
  ``BYTES``) on the same app, so they sit behind the same key on the same port;
* uvicorn keeps idle connections open as long as it is told (past the load balancer's idle
  timeout), where the script fixes five seconds and the load balancer would reuse
  connections the server already closed.

The frontend's modules are imported from ``/opt/tritonserver/python/openai/openai_frontend``
(on ``PYTHONPATH``), ``tritonserver`` from the image; both only when the server starts, so
this file imports the standard library alone until then. Read against Triton 25.11
(server v2.63.0: ``python/openai/openai_frontend/main.py``, ``frontend/fastapi_frontend.py``;
core r25.11: ``python/tritonserver/_api/_model.py``, ``_request.py``, ``_tensor.py``).

``BYTES`` tensors travel as Triton's HTTP frontend carries them in JSON (``src/http_server.cc``
at r25.11, ``ReadDataFromJson`` and ``WriteDataToJson``): each element is a JSON string whose
UTF-8 bytes are the element, nested lists flattened in row-major order. The in-process API
takes them as a numpy array of ``bytes`` objects and returns them through
``Tensor.to_bytes_array`` (DLPack has no type for them). An output element that is not UTF-8
text cannot be a JSON string: the request fails rather than answer JSON no client parses.
Tensor data in binary (the binary tensor data extension, ``docs/protocol/
extension_binary_data.md``) is not served here: such a request is refused, naming JSON.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from .api_key_auth import (
    API_KEY_ENV,
    METRICS_PATH,
    APIKeyMiddleware,
    ASGIApp,
    api_key_from_environment,
)

# The frontend's readiness route (routers/observability.py): 200 once every model is ready.
READY_PATH = "/health/ready"
INFER_PATH = "/v2/models/{model}/infer"
# The datatype of strings and byte strings, each element a JSON string.
BYTES = "BYTES"
# The header of the binary tensor data extension: the length of the JSON before the tensors.
BINARY_HEADER = "inference-header-content-length"
# KServe v2's numeric datatypes and the numpy types they travel as.
V2_DATATYPES: Mapping[str, str] = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}
_NUMPY_DATATYPES = {numpy_type: v2 for v2, numpy_type in V2_DATATYPES.items()}
_END = object()


class TritonAPIKeyMiddleware(APIKeyMiddleware):
    """The platform's check, leaving open the readiness route (probes, the load balancer's
    health checks) and ``/metrics`` (Prometheus, in-cluster; the load balancer never
    forwards it)."""

    open_paths: ClassVar[frozenset[str]] = frozenset({READY_PATH, METRICS_PATH})


class RequestError(ValueError):
    """A v2 inference request this server cannot run, with the reason for the client."""


class ResponseError(RuntimeError):
    """A model's response that a v2 JSON response cannot carry."""


def v2_inputs(body: Any) -> dict[str, Any]:
    """The input arrays of a KServe v2 JSON request (``inputs``: name, shape, datatype, data):
    numeric ones of their numpy type, ``BYTES`` ones of ``bytes`` objects."""
    import numpy

    if not isinstance(body, dict) or not isinstance(body.get("inputs"), list) or not body["inputs"]:
        raise RequestError("the body must be a JSON object with a non-empty list 'inputs'")
    arrays: dict[str, Any] = {}
    for tensor in body["inputs"]:
        if not isinstance(tensor, dict):
            raise RequestError("each input is an object with name, shape, datatype and data")
        name, shape, datatype = tensor.get("name"), tensor.get("shape"), tensor.get("datatype")
        if not isinstance(name, str) or not name:
            raise RequestError("each input needs a name")
        if not isinstance(datatype, str) or datatype not in (*V2_DATATYPES, BYTES):
            served = ", ".join((*V2_DATATYPES, BYTES))
            raise RequestError(f"input {name}: datatype must be one of {served}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise RequestError(f"input {name}: shape must be a list of sizes")
        if "binary_data_size" in (tensor.get("parameters") or {}):
            raise RequestError(f"input {name}: binary tensor data is not served; send it as JSON")
        if datatype == BYTES:
            arrays[name] = _bytes_array(name, tensor.get("data"), shape)
            continue
        try:
            array = numpy.asarray(tensor.get("data"), dtype=V2_DATATYPES[datatype])
            arrays[name] = array.reshape(shape)
        except (TypeError, ValueError) as error:
            raise RequestError(f"input {name}: data does not fit shape {shape}: {error}") from None
    return arrays


def _elements(data: list[Any]) -> Iterator[Any]:
    """The elements of a JSON tensor in row-major order, nested lists flattened (without
    recursion: the nesting is the client's)."""
    stack = [iter(data)]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            stack.append(iter(item))
        else:
            yield item


def _bytes_array(name: str, data: Any, shape: list[int]) -> Any:
    """A ``BYTES`` input: each element a JSON string, taken as its UTF-8 bytes."""
    import numpy

    if not isinstance(data, list):
        raise RequestError(f"input {name}: data must be a list of strings")
    elements = list(_elements(data))
    if not all(isinstance(element, str) for element in elements):
        raise RequestError(f"input {name}: BYTES data must be JSON strings")
    if len(elements) != math.prod(shape):
        raise RequestError(
            f"input {name}: data does not fit shape {shape}: {len(elements)} elements for "
            f"{math.prod(shape)}"
        )
    array = numpy.empty(len(elements), dtype=object)
    try:
        array[:] = [element.encode("utf-8") for element in elements]
    except UnicodeEncodeError:
        raise RequestError(f"input {name}: an element is not UTF-8 text") from None
    return array.reshape(shape)


def _text(name: str, element: Any) -> str:
    if isinstance(element, bytes):
        try:
            return element.decode("utf-8")
        except UnicodeDecodeError:
            pass
    raise ResponseError(
        f"output {name} holds an element that is not UTF-8 text, which a JSON response cannot carry"
    )


def v2_outputs(model: str, outputs: Mapping[str, Any]) -> dict[str, Any]:
    """A KServe v2 JSON response of ``outputs`` (name to a numpy array; ``BYTES`` outputs as
    the in-process API returns them, arrays of ``bytes`` objects)."""
    tensors = []
    for name, array in outputs.items():
        datatype = BYTES if array.dtype == object else _NUMPY_DATATYPES.get(str(array.dtype))
        if datatype is None:
            raise ResponseError(f"output {name} has type {array.dtype}, which is not served")
        if datatype == BYTES:
            data = [_text(name, element) for element in array.flatten()]
        else:
            data = array.flatten().tolist()
        tensors.append(
            {"name": name, "shape": list(array.shape), "datatype": datatype, "data": data}
        )
    return {"model_name": model, "outputs": tensors}


def host_array(tensor: Any) -> Any:
    """A response tensor of the in-process API as a numpy array on the host: ``BYTES``
    deserialized by the API (``Tensor.to_bytes_array``), other types through DLPack."""
    import numpy

    if tensor.data_type.name == BYTES:
        return tensor.to_bytes_array()
    return numpy.from_dlpack(tensor)


def add_v2_inference(app: Any, server: Any, models: Sequence[str]) -> None:
    """Add ``POST /v2/models/<model>/infer`` for ``models`` (the framework models) to ``app``."""
    from fastapi import Request
    from fastapi.responses import JSONResponse

    served = frozenset(models)

    async def infer(model: str, request: Request) -> JSONResponse:
        if model not in served:
            return JSONResponse({"error": f"no framework model {model!r}"}, status_code=404)
        try:
            if BINARY_HEADER in request.headers:
                raise RequestError("binary tensor data is not served; send the tensors as JSON")
            try:
                body = json.loads(await request.body())
            except (ValueError, RecursionError):
                raise RequestError("the body is not JSON") from None
            inputs = v2_inputs(body)
            triton_request = server.model(model).create_request(
                inputs=inputs, output_memory_type="cpu"
            )
            outputs: dict[str, Any] = {}
            async for response in server.model(model).async_infer(triton_request):
                for name, tensor in response.outputs.items():
                    outputs[name] = host_array(tensor)
            return JSONResponse(v2_outputs(model, outputs))
        except RequestError as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        except ResponseError as error:
            return JSONResponse({"error": str(error)}, status_code=500)

    # FastAPI resolves annotations in the module's globals, where Request (imported here, so
    # that the module needs nothing beyond the standard library until the server starts) is not.
    infer.__annotations__["request"] = Request
    app.add_api_route(INFER_PATH, infer, methods=["POST"])


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-repository", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--keep-alive-seconds", type=int, default=5)
    parser.add_argument("--default-max-tokens", type=int, required=True)
    parser.add_argument("--framework-model", action="append", default=[])
    parser.add_argument(
        "--require-api-key",
        action="store_true",
        help=f"answer only requests carrying the key in {API_KEY_ENV}",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Start Triton on the repository, then serve the OpenAI and v2 routes until stopped."""
    args = _arguments(argv)
    # Fail before loading any model when the key is required but missing.
    api_key = api_key_from_environment(API_KEY_ENV) if args.require_api_key else None

    import tritonserver
    import uvicorn
    from engine.triton_engine import TritonLLMEngine
    from frontend.fastapi_frontend import FastApiFrontend

    server = tritonserver.Server(
        model_repository=args.model_repository,
        log_info=True,
        log_warn=True,
        log_error=True,
    ).start(wait_until_ready=True)
    engine = TritonLLMEngine(
        server=server, tokenizer=args.tokenizer, default_max_tokens=args.default_max_tokens
    )
    frontend = FastApiFrontend(engine=engine, host="0.0.0.0", port=args.port)
    app: ASGIApp = frontend.app
    add_v2_inference(frontend.app, server, args.framework_model)
    if api_key is not None:
        app = TritonAPIKeyMiddleware(app, api_key)
    try:
        uvicorn.run(
            app,
            host="0.0.0.0",
            port=args.port,
            timeout_keep_alive=args.keep_alive_seconds,
            log_level="info",
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
