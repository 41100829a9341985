"""The files of a Triton model repository: each model's ``config.pbtxt``, the LLM's ``model.json``.

Pure functions of a validated spec, so the files can be read and tested on their own: every
``config.pbtxt`` is a ``ModelConfig`` message of Triton's ``model_config.proto`` in protobuf
text format, and ``model.json`` holds the engine arguments Triton's vLLM backend passes to
``AsyncEngineArgs``, the very arguments a standalone vLLM deployment of the spec gets
(:func:`eks_inference.charts.vllm_server.vllm_engine_args`).

How the repository reaches the server. The generated files travel with the manifests, in
the ConfigMap ``<deployment>-model-repository``: a file per key (``<model>.config.pbtxt``,
``<model>.model.json``), since a key cannot hold ``/``. The pod assembles the repository at
:data:`REPOSITORY_PATH` from mounts alone: each config file is mounted at
``<model>/config.pbtxt`` (and the LLM's engine arguments at ``<model>/<version>/model.json``)
by ``subPath``, and each version directory of a framework model is the directory
``<model>/<version>/`` of the repository prefix in the model bucket, mounted read-only by
``subPath`` from one Mountpoint volume. Nothing is copied at start-up, a changed file changes
the pod template (its digest is an annotation), and the model files are uploaded like weights.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from eks_inference.engines.triton.options import MODEL_FILENAMES, Tensor, TritonModel, TritonOptions

# Where the server reads its repository.
REPOSITORY_PATH = "/models"
CONFIG_FILE = "config.pbtxt"
ENGINE_ARGS_FILE = "model.json"
# The vLLM backend reports its engine metrics (tokens, time to first token, latencies) through
# Triton's /metrics only when the model config asks for them (src/model.py at r25.11).
_REPORT_METRICS_PARAMETER = "REPORT_CUSTOM_METRICS"


@dataclass(frozen=True)
class RepositoryFile:
    """One generated file: its ConfigMap key and its path below :data:`REPOSITORY_PATH`."""

    key: str
    path: str
    content: str


def _quoted(value: str) -> str:
    return json.dumps(value)


def _tensor(tensor: Tensor) -> str:
    dims = ", ".join(str(d) for d in tensor.dims)
    return (
        f"  {{\n    name: {_quoted(tensor.name)}\n    data_type: {tensor.data_type}\n"
        f"    dims: [ {dims} ]\n  }}"
    )


def _list(field: str, items: Iterable[str]) -> str:
    return f"{field} [\n" + ",\n".join(items) + "\n]"


def _versions(model: TritonModel) -> str:
    listed = ", ".join(str(v) for v in model.versions)
    return f"version_policy {{ specific {{ versions: [ {listed} ] }} }}"


def llm_config(model: TritonModel) -> str:
    """``config.pbtxt`` of the model on the vLLM backend.

    The backend declares its tensors itself; it must be decoupled (it streams responses),
    takes no batch dimension (vLLM batches inside) and runs as one ``KIND_MODEL`` instance
    that owns the pod's GPUs, as its multi-GPU check requires for tensor parallelism.
    """
    return "\n".join(
        (
            f"name: {_quoted(model.name)}",
            'backend: "vllm"',
            "max_batch_size: 0",
            _versions(model),
            "model_transaction_policy { decoupled: true }",
            "instance_group [ { count: 1 kind: KIND_MODEL } ]",
            "parameters {",
            f"  key: {_quoted(_REPORT_METRICS_PARAMETER)}",
            '  value { string_value: "true" }',
            "}",
            "",
        )
    )


def framework_config(model: TritonModel) -> str:
    """``config.pbtxt`` of an ONNX Runtime or PyTorch model, complete (no auto-completion)."""
    lines = [
        f"name: {_quoted(model.name)}",
        f"backend: {_quoted(model.backend)}",
        f"max_batch_size: {model.max_batch_size}",
        _versions(model),
        _list("input", (_tensor(t) for t in model.inputs)),
        _list("output", (_tensor(t) for t in model.outputs)),
    ]
    batching = model.dynamic_batching
    if batching is not None:
        preferred = ", ".join(str(s) for s in batching.preferred_batch_sizes)
        lines.append(
            "dynamic_batching {"
            + (f" preferred_batch_size: [ {preferred} ]" if preferred else "")
            + f" max_queue_delay_microseconds: {batching.max_queue_delay_microseconds} }}"
        )
    groups = ", ".join(f"{{ count: {g.count} kind: {g.kind} }}" for g in model.groups)
    lines.append(f"instance_group [ {groups} ]")
    lines.append(f"default_model_filename: {_quoted(MODEL_FILENAMES[model.backend])}")
    return "\n".join(lines) + "\n"


def repository_files(
    options: TritonOptions, engine_args: Mapping[str, object]
) -> tuple[RepositoryFile, ...]:
    """Every generated file of the repository ``options``, in model order.

    ``engine_args`` are the LLM's vLLM engine arguments (``model.json``), as
    :func:`eks_inference.charts.vllm_server.vllm_engine_args` gives them for the deployment.
    """
    files = []
    for model in options.models:
        if model.is_llm:
            files.append(
                RepositoryFile(
                    f"{model.name}.{CONFIG_FILE}", f"{model.name}/{CONFIG_FILE}", llm_config(model)
                )
            )
            content = json.dumps(dict(engine_args), indent=2, sort_keys=True) + "\n"
            files.extend(
                RepositoryFile(
                    f"{model.name}.{version}.{ENGINE_ARGS_FILE}",
                    f"{model.name}/{version}/{ENGINE_ARGS_FILE}",
                    content,
                )
                for version in model.versions
            )
        else:
            files.append(
                RepositoryFile(
                    f"{model.name}.{CONFIG_FILE}",
                    f"{model.name}/{CONFIG_FILE}",
                    framework_config(model),
                )
            )
    return tuple(files)


def version_directories(options: TritonOptions) -> tuple[str, ...]:
    """The framework models' version directories, ``<model>/<version>``, below the prefix."""
    return tuple(
        f"{model.name}/{version}"
        for model in options.framework_models
        for version in model.versions
    )


def files_digest(files: Iterable[RepositoryFile]) -> str:
    """A sha256 (hex) of the files' keys, paths and contents, to roll pods when one changes."""
    digest = hashlib.sha256()
    for file in files:
        for part in (file.key, file.path, file.content):
            encoded = part.encode()
            digest.update(len(encoded).to_bytes(8, "big"))
            digest.update(encoded)
    return digest.hexdigest()
