"""A Triton model repository, typed: what ``engine: triton`` serves, checked before it deploys.

Triton reads a folder of models, each a ``config.pbtxt`` and numbered version directories,
and finds a mistake in them only when the server starts. Here the repository is part of the
deployment spec (``options.models``), so what a server would refuse at start-up (a model with
no version, a backend its image does not have, models that do not fit the GPU together)
fails validation under the field that causes it, with what would work.

The repository holds exactly one model on the vLLM backend, the deployment's own ``model``
served with its ``limits`` and ``weights`` (so the engine arguments are the ones every vLLM
deployment gets), and optionally models of other frameworks (ONNX Runtime, PyTorch) with
their inputs, outputs, batching and instance groups. The files of those models are the
operator's: each version directory ``<repository_prefix><model>/<version>/`` in the model
bucket, uploaded like weights. :mod:`eks_inference.engines.triton.repository` writes every
``config.pbtxt`` and the LLM's ``model.json``.

The images. NVIDIA publishes Triton with the vLLM backend only in the ``-vllm-python-py3``
image, which ships the ``vllm`` and ``python`` backends and none of the framework backends;
ONNX Runtime and PyTorch are in the general ``-py3`` image, which has no vLLM (NVIDIA's
answers in triton-inference-server/server issues 6708, 7445 and 8342; the
``-vllm-python-py3`` rows of ``docs/introduction/compatibility.md`` at v2.63.0). A
repository that mixes the two runs on an image built from both, named in ``options.image``
by digest with the backends it carries (``docs/triton.md`` gives its Dockerfile).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from eks_inference import versions
from eks_inference.catalog import sizing
from eks_inference.specification.aws_types import KeyPrefix
from eks_inference.specification.engines import engine_options
from eks_inference.specification.validation import Problems, rule_error
from eks_inference.specification.weights import unpinned_image_problem

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec

TritonBackend = Literal["vllm", "onnxruntime", "pytorch"]
"""The backends a repository's models may use: vLLM for the LLM, ONNX Runtime and PyTorch
(LibTorch) for the others."""
VLLM_BACKEND = "vllm"
# What each pinned NGC image ships among TritonBackend (see the module docstring).
IMAGE_BACKENDS: dict[str, frozenset[str]] = {
    versions.TRITON_VLLM_IMAGE: frozenset({"vllm", "python"}),
    versions.TRITON_IMAGE: frozenset({"onnxruntime", "pytorch", "python", "tensorrt"}),
}
# The file Triton loads from a version directory of each framework backend, by default.
MODEL_FILENAMES: dict[str, str] = {"onnxruntime": "model.onnx", "pytorch": "model.pt"}
# The data types of model_config.proto's DataType (TYPE_INVALID aside).
DataType = Literal[
    "TYPE_BOOL",
    "TYPE_UINT8",
    "TYPE_UINT16",
    "TYPE_UINT32",
    "TYPE_UINT64",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_STRING",
    "TYPE_BF16",
]
InstanceKind = Literal["KIND_GPU", "KIND_CPU"]
# Each CUDA process on a GPU (Triton's own, and vLLM's engine beside it) holds a context of a
# few hundred MiB that no model's figure counts; the fit reserves this much per GPU for them.
CUDA_CONTEXTS_MIB = 1024
_MIB = 1024 * 1024
MAX_MODELS = 16
MAX_VERSIONS = 8
MAX_BATCH_SIZE = 2**16
MAX_QUEUE_DELAY_US = 10_000_000
# Triton finds a model by its directory's name, and clients name it so; a lowercase label
# with '_' keeps it a valid ConfigMap key part and file name.
_MODEL_NAME = r"^[a-z][a-z0-9_-]{0,62}$"
# A tensor's name as frameworks export it (ONNX graph inputs, TorchScript's INPUT__0).
_TENSOR_NAME = r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,127}$"


def _dimension(value: int) -> int:
    if value == 0 or value < -1:
        raise rule_error(f"dimension {value} is not a size; use a positive size or -1 (variable)")
    return value


def _digest_image(value: str) -> str:
    problem = unpinned_image_problem(value, "a tag can later name another build")
    if problem is not None:
        raise rule_error(problem)
    return value


Dimension = Annotated[int, AfterValidator(_dimension)]


class Tensor(BaseModel):
    """One input or output of a model, as its framework exports it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=_TENSOR_NAME, description="The tensor's name in the model.")
    data_type: DataType
    dims: tuple[Dimension, ...] = Field(
        min_length=1,
        max_length=8,
        description="Shape without the batch dimension; -1 for a variable size.",
    )


class DynamicBatching(BaseModel):
    """Triton's dynamic batcher: requests are combined into batches up to max_batch_size."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    preferred_batch_sizes: tuple[Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)], ...] = Field(
        default=(), max_length=16
    )
    max_queue_delay_microseconds: int = Field(default=0, ge=0, le=MAX_QUEUE_DELAY_US)


class InstanceGroup(BaseModel):
    """Copies of a model Triton runs: ``count`` on each GPU of the pod, or on its CPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(default=1, ge=1, le=16)
    kind: InstanceKind = "KIND_GPU"


class TritonModel(BaseModel):
    """One model of the repository.

    The model on the ``vllm`` backend is the deployment's LLM and takes nothing but its
    ``name`` and ``versions``; a framework model (``onnxruntime``, ``pytorch``) gives its
    tensors, batching, instance groups and the GPU memory one instance uses, which the fit
    check adds up.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        pattern=_MODEL_NAME, description="The model's name in Triton and for clients."
    )
    backend: TritonBackend
    versions: tuple[Annotated[int, Field(ge=1, le=2**31 - 1)], ...] = Field(
        default=(),
        max_length=MAX_VERSIONS,
        description="The versions served: directories <repository_prefix><name>/<version>/.",
    )
    max_batch_size: int = Field(
        default=0, ge=0, le=MAX_BATCH_SIZE, description="0: the model takes no batch dimension."
    )
    inputs: tuple[Tensor, ...] = Field(default=(), max_length=64)
    outputs: tuple[Tensor, ...] = Field(default=(), max_length=64)
    dynamic_batching: DynamicBatching | None = None
    instance_groups: tuple[InstanceGroup, ...] = Field(default=(), max_length=4)
    gpu_memory_mib: int = Field(
        default=0,
        ge=0,
        le=2**20,
        description="GPU memory one instance takes at max_batch_size (weights, activations, "
        "workspace), measured; the fit check adds it up per GPU.",
    )

    @property
    def is_llm(self) -> bool:
        return self.backend == VLLM_BACKEND

    @property
    def groups(self) -> tuple[InstanceGroup, ...]:
        """The instance groups, one instance per GPU when none is given."""
        return self.instance_groups or (InstanceGroup(),)

    @property
    def gpu_instances_per_gpu(self) -> int:
        """Instances on each GPU: Triton places a KIND_GPU group's count on every GPU."""
        return sum(g.count for g in self.groups if g.kind == "KIND_GPU")


class TritonImage(BaseModel):
    """A Triton image of your own, pinned by digest, and the backends it carries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uri: Annotated[str, AfterValidator(_digest_image)] = Field(
        max_length=512, description="<registry>/<repository>[:<tag>]@sha256:<digest>"
    )
    backends: tuple[Literal["vllm", "onnxruntime", "pytorch", "python", "tensorrt"], ...] = Field(
        min_length=1, max_length=8
    )


class TritonOptions(BaseModel):
    """``engine: triton``: the model repository the server loads.

    Example (YAML)::

        engine: triton
        options:
          repository_prefix: triton/chat/
          models:
            - {name: chat, backend: vllm, versions: [1]}
            - name: embed
              backend: onnxruntime
              versions: [1]
              max_batch_size: 32
              inputs: [{name: input_ids, data_type: TYPE_INT64, dims: [-1]}]
              outputs: [{name: embeddings, data_type: TYPE_FP32, dims: [384]}]
              gpu_memory_mib: 2048
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: tuple[TritonModel, ...] = Field(min_length=1, max_length=MAX_MODELS)
    repository_prefix: KeyPrefix | None = Field(
        default=None,
        description="Bucket prefix of the framework models' files, <prefix><model>/<version>/; "
        "required when the repository has a model beside the LLM.",
    )
    image: TritonImage | None = Field(
        default=None,
        description="An image of your own with the backends the pinned ones lack; default: "
        f"{versions.TRITON_VLLM_IMAGE}.",
    )

    @property
    def llm(self) -> TritonModel:
        """The model on the vLLM backend (validation makes sure there is exactly one)."""
        return next(m for m in self.models if m.is_llm)

    @property
    def framework_models(self) -> tuple[TritonModel, ...]:
        return tuple(m for m in self.models if not m.is_llm)

    @property
    def mounted_prefix(self) -> str | None:
        """The bucket prefix the server mounts the framework models' files from, if any."""
        return self.repository_prefix if self.framework_models else None

    @property
    def image_uri(self) -> str:
        return self.image.uri if self.image is not None else versions.TRITON_VLLM_IMAGE

    @property
    def image_backends(self) -> frozenset[str]:
        if self.image is not None:
            return frozenset(self.image.backends)
        return IMAGE_BACKENDS[versions.TRITON_VLLM_IMAGE]


def check_repository(options: TritonOptions, problems: Problems) -> None:
    """Names, versions, the one LLM, each model's fields and the image's backends."""
    seen: dict[str, int] = {}
    for i, model in enumerate(options.models):
        where = ("options", "models", i)
        earlier = seen.setdefault(model.name, i)
        if earlier != i:
            problems.add(
                (*where, "name"),
                f"model name {model.name!r} is also options.models.{earlier}.name; Triton "
                "finds a model by its directory's name: give each model its own",
                model.name,
            )
        _check_versions(model, where, problems)
        if model.is_llm:
            _check_llm_fields(model, where, problems)
        else:
            _check_framework_model(model, where, problems)
        if model.backend not in options.image_backends:
            problems.add(
                (*where, "backend"),
                _missing_backend(options, model.backend),
                model.backend,
            )
    llms = [i for i, m in enumerate(options.models) if m.is_llm]
    if len(llms) != 1:
        problems.add(
            ("options", "models"),
            f"the repository has {len(llms)} models on the vllm backend; it serves the "
            "deployment's model on exactly one: keep one {name: <name>, backend: vllm, "
            "versions: [1]} (serve another LLM as a deployment of its own)",
        )
    if options.framework_models and options.repository_prefix is None:
        problems.add(
            ("options", "repository_prefix"),
            "the framework models' files come from the model bucket: set repository_prefix "
            "(e.g. triton/<deployment>/), under which each version is "
            "<prefix><model>/<version>/<file>",
        )


def _check_versions(model: TritonModel, where: tuple[str | int, ...], problems: Problems) -> None:
    if not model.versions:
        problems.add(
            (*where, "versions"),
            f"model {model.name!r} has no version, so Triton would load nothing for it; "
            "list the versions to serve, e.g. versions: [1]",
        )
        return
    if len(set(model.versions)) != len(model.versions):
        problems.add(
            (*where, "versions"),
            f"versions {list(model.versions)} repeat a version; list each once",
            list(model.versions),
        )
    if model.is_llm and len(model.versions) > 1:
        problems.add(
            (*where, "versions"),
            f"the vllm model serves one version (each would start a vLLM engine on the same "
            f"GPUs); keep one, e.g. versions: [{max(model.versions)}], and canary a new model "
            "as a deployment of its own behind an endpoint split",
            list(model.versions),
        )


def _check_llm_fields(model: TritonModel, where: tuple[str | int, ...], problems: Problems) -> None:
    # The vLLM backend declares its own tensors and batches inside vLLM; the deployment's
    # limits size it. A value here would be ignored, or would stop the model loading.
    for field in sorted(model.model_fields_set - {"name", "backend", "versions"}):
        problems.add(
            (*where, field),
            f"{field} does not apply to the vllm model (its tensors and batching are the vLLM "
            "backend's, its size the deployment's limits): remove it",
        )


def _check_framework_model(
    model: TritonModel, where: tuple[str | int, ...], problems: Problems
) -> None:
    for field in ("inputs", "outputs"):
        if not getattr(model, field):
            problems.add(
                (*where, field),
                f"model {model.name!r} needs its {field} (name, data_type, dims of each tensor "
                "as the model file exports them); Triton does not guess them here",
            )
    batching = model.dynamic_batching
    if batching is not None and model.max_batch_size == 0:
        problems.add(
            (*where, "dynamic_batching"),
            "dynamic batching needs a batch dimension: set max_batch_size (e.g. 32) or remove "
            "dynamic_batching",
        )
    if batching is not None and model.max_batch_size > 0:
        too_large = [s for s in batching.preferred_batch_sizes if s > model.max_batch_size]
        if too_large:
            problems.add(
                (*where, "dynamic_batching", "preferred_batch_sizes"),
                f"preferred batch sizes {too_large} exceed max_batch_size "
                f"({model.max_batch_size}); drop them or raise max_batch_size",
                too_large,
            )
    if model.gpu_instances_per_gpu and model.gpu_memory_mib == 0:
        problems.add(
            (*where, "gpu_memory_mib"),
            f"model {model.name!r} runs on the GPU: give gpu_memory_mib, the memory one "
            "instance takes at max_batch_size (measured), so the fit beside the LLM is checked; "
            "or use instance_groups: [{kind: KIND_CPU}]",
        )


def _missing_backend(options: TritonOptions, backend: str) -> str:
    image = options.image_uri
    shipped = ", ".join(sorted(options.image_backends))
    if options.image is not None:
        return (
            f"backend {backend} is not among the backends options.image declares ({shipped}); "
            "add it if the image carries it, or use one of those"
        )
    others = [uri for uri, backends in IMAGE_BACKENDS.items() if backend in backends]
    source = f" (it is in {others[0]})" if others else ""
    return (
        f"backend {backend} is not in {image}, which ships {shipped}; NVIDIA publishes no "
        f"image with both vllm and {backend}{source}: build one from the two and name it in "
        f"options.image with backends: [vllm, python, {backend}] (see docs/triton.md)"
    )


def framework_memory_mib(options: TritonOptions) -> int:
    """GPU memory the framework models' instances take on each GPU of the pod."""
    return sum(m.gpu_instances_per_gpu * m.gpu_memory_mib for m in options.framework_models)


def utilization_leaving_room(options: TritonOptions, gpu_memory_bytes: int) -> float:
    """The largest ``gpu_memory_utilization`` (two decimals) that leaves the framework models
    and the CUDA contexts their memory on each GPU; 0 or less when nothing does."""
    reserved = (framework_memory_mib(options) + CUDA_CONTEXTS_MIB) * _MIB
    return math.floor((1 - reserved / gpu_memory_bytes) * 100) / 100


def check_gpu_fit(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The framework models fit each GPU beside vLLM, whose share the LLM's fit sizes.

    vLLM takes ``limits.gpu_memory_utilization`` of every GPU of the pod for the weights and
    KV cache that :func:`eks_inference.catalog.sizing.memory_fit` sizes (the deployment's own fit
    rule); the framework models' instances on a GPU and the CUDA contexts
    (:data:`CUDA_CONTEXTS_MIB`) must fit in the rest. The fix names the utilization that
    leaves them room and, when the LLM no longer fits there, the batch that does.
    """
    options = triton_options(spec)
    if not options.framework_models:
        return
    gpu = spec.instance.memory_per_core_bytes
    utilization = spec.limits.gpu_memory_utilization
    models = framework_memory_mib(options)
    left = int(gpu * (1 - utilization))
    if (models + CUDA_CONTEXTS_MIB) * _MIB <= left:
        return
    room = utilization_leaving_room(options, gpu)
    arch, limits, degree = spec.model.architecture, spec.limits, spec.tensor_parallel_size
    if room <= 0:
        fix = "give the framework models fewer GPU instances, or a deployment of their own"
    elif sizing.memory_fit(
        arch, spec.instance, degree, limits.max_model_len, limits.max_num_seqs, room
    ).fits:
        fix = f"lower limits.gpu_memory_utilization to {room}"
    else:
        seqs = sizing.max_num_seqs_that_fit(arch, spec.instance, degree, limits.max_model_len, room)
        fix = (
            f"lower limits.gpu_memory_utilization to {room} and max_num_seqs to {seqs}"
            if seqs
            else "give the framework models fewer GPU instances, or a deployment of their own"
        )
    problems.add(
        ("options", "models"),
        f"the framework models take {models} MiB on each GPU (plus {CUDA_CONTEXTS_MIB} MiB "
        f"of CUDA contexts), but vLLM leaves {left // _MIB} MiB of the {gpu // _MIB} MiB "
        f"of {spec.instance_type}'s GPU at gpu_memory_utilization {utilization}; {fix}",
    )


def check_triton(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The repository of a spec naming ``engine: triton`` must load."""
    check_repository(triton_options(spec), problems)


def triton_options(spec: ModelDeploymentSpec) -> TritonOptions:
    """The model repository of a spec naming ``engine: triton``."""
    return engine_options(spec, TritonOptions)
