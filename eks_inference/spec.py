"""``ModelDeploymentSpec``: what to serve, typed and validated before anything is built.

Every rule a deployment must satisfy lives here. A spec that cannot work on its hardware fails
with a :class:`pydantic.ValidationError` listing every problem at once, each under its field
path and saying what would work.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    model_validator,
)

from eks_inference import sizing
from eks_inference.aws_types import key_prefix_problem
from eks_inference.catalog import (
    INSTANCE_TYPES,
    MODELS,
    NEURON_POOR_COMPILE_FAMILIES,
    Accelerator,
    InstanceType,
    ModelArchitecture,
)
from eks_inference.validation import Problems

VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
# A standalone vLLM Deployment rolls out one extra pod before removing an old one (maxSurge),
# so an update never lowers capacity; the node pool must have room for it.
VLLM_ROLLOUT_SURGE = 1
Engine = Literal["vllm", "rayservice"]
Loader = Literal["mountpoint", "runai_streamer"]


class ModelRef(BaseModel):
    """The model to serve: its Hugging Face id (also the served model name) and architecture.

    In YAML, a catalog name (``model: llama-3-8b``) stands for the catalog's entry.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, description="Hugging Face id; clients use it as model name.")
    revision: str = Field(default="main", min_length=1, description="Weights revision (commit).")
    architecture: ModelArchitecture


def _expand_catalog_name(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    entry = MODELS.get(value)
    if entry is None:
        raise ValueError(
            f"unknown catalog model {value!r}; use one of {', '.join(sorted(MODELS))} "
            "or give {id, architecture} explicitly"
        )
    return {"id": entry.hf_id, "architecture": entry.architecture}


CatalogModelName = Literal[tuple(MODELS)]  # type: ignore[valid-type]
CatalogOrExplicitModel = Annotated[
    ModelRef,
    BeforeValidator(_expand_catalog_name, json_schema_input_type=CatalogModelName | ModelRef),
]


class Limits(BaseModel):
    """Engine limits. Defaults suit a 7-8B chat model: 4k context, a batch of 32."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_model_len: PositiveInt = 4096
    max_num_seqs: PositiveInt = 32
    block_size: int = Field(default=16, description=f"KV block size, one of {VLLM_BLOCK_SIZES}.")
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=0.98)


class Scaling(BaseModel):
    """Replica bounds and the queue-depth target Ray Serve scales on.

    ``target_ongoing_requests`` defaults to three quarters of ``max_num_seqs``: a replica
    scales out before its batch is full, so requests rarely wait in a queue.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_replicas: NonNegativeInt = 1
    max_replicas: PositiveInt = 1
    target_ongoing_requests: PositiveInt | None = None


class Weights(BaseModel):
    """Where the weights are in the model bucket and how pods read them.

    ``mountpoint`` mounts the prefix read-only through the Mountpoint for S3 CSI driver (any
    engine); ``runai_streamer`` lets standalone vLLM on GPUs stream ``s3://`` directly, with
    no volume at all, which starts fastest.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix: str = Field(description="Key prefix in the model bucket, ending '/'.")
    loader: Loader = "mountpoint"


class NeuronOptions(BaseModel):
    """Inferentia2 options: where compiled artifacts live and the shapes compiled for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compiled_artifacts_prefix: str | None = Field(
        default=None,
        description="Bucket prefix under which compiled artifacts are kept, ending '/'.",
    )
    sequence_buckets: tuple[PositiveInt, ...] = Field(
        default=(),
        description="Context-encoding and token-generation buckets (powers of two); "
        "empty lets the Neuron plugin derive them from max_model_len.",
    )
    allow_compile_at_startup: bool = Field(
        default=False,
        description="Development only: serve without compiled artifacts, compiling in the pod.",
    )
    allow_poor_compile_architecture: bool = Field(
        default=False,
        description="Opt in to architectures known to compile poorly on Neuron (Gemma).",
    )
    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra override_neuron_config entries; they change the compiled graph.",
    )
    run_compile_job: bool = Field(
        default=False,
        description="Apply the compile job with the deployment. Off by default so a routine "
        "deploy never recompiles; k8s_manifests/ holds the job either way.",
    )


class ModelDeploymentSpec(BaseModel):
    """One model served on one accelerator instance type, by vLLM or Ray Serve on KubeRay.

    Example (YAML)::

        name: llama3-8b-inf2
        model: llama-3-8b
        instance_type: inf2.48xlarge
        engine: rayservice
        tensor_parallel_size: 8
        scaling: {min_replicas: 1, max_replicas: 3}
        weights: {prefix: models/llama-3-8b/}
        neuron: {compiled_artifacts_prefix: neuron-artifacts/}
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
        max_length=40,
        description="DNS-1123 label; prefixes every Kubernetes object of the deployment.",
    )
    model: CatalogOrExplicitModel
    instance_type: str
    engine: Engine = "rayservice"
    tensor_parallel_size: PositiveInt = 1
    limits: Limits = Limits()
    scaling: Scaling = Scaling()
    weights: Weights
    neuron: NeuronOptions | None = None

    @property
    def instance(self) -> InstanceType:
        return INSTANCE_TYPES[self.instance_type]

    @property
    def accelerator(self) -> Accelerator:
        return self.instance.accelerator

    @property
    def on_neuron(self) -> bool:
        return self.accelerator is Accelerator.NEURON

    @property
    def neuron_options(self) -> NeuronOptions:
        """Neuron options, defaulted when the spec gives none."""
        return self.neuron or NeuronOptions()

    @property
    def compiled_artifacts_prefix(self) -> str | None:
        """The bucket prefix of this deployment's compiled Neuron artifacts, if it has any.

        Set only on Inferentia2 with ``neuron.compiled_artifacts_prefix``: then a compile job
        publishes the artifacts and the servers load them. ``None`` on GPUs, and on Neuron
        when the pods compile at start-up (development).
        """
        return self.neuron_options.compiled_artifacts_prefix if self.on_neuron else None

    @property
    def has_compiled_artifacts(self) -> bool:
        """True when the deployment serves compiled Neuron artifacts from the model bucket."""
        return self.compiled_artifacts_prefix is not None

    @property
    def replicas_per_node(self) -> int:
        return sizing.replicas_per_node(self.instance, self.tensor_parallel_size)

    @property
    def max_nodes(self) -> int:
        """Nodes the deployment occupies at ``max_replicas``."""
        return sizing.nodes_needed(self.scaling.max_replicas, self.replicas_per_node)

    @property
    def rollout_headroom_replicas(self) -> int:
        """Replicas a rollout runs beside the current ones.

        A vLLM Deployment surges one pod before it removes an old one (no capacity is lost
        during an update); a RayService upgrade starts a new Ray cluster at ``min_replicas``
        workers and switches traffic only once it serves.
        """
        return VLLM_ROLLOUT_SURGE if self.engine == "vllm" else max(self.scaling.min_replicas, 1)

    @property
    def nodes_during_rollout(self) -> int:
        """Nodes needed while a rollout runs at ``max_replicas``: the pool must hold this."""
        return sizing.nodes_needed(
            self.scaling.max_replicas + self.rollout_headroom_replicas, self.replicas_per_node
        )

    @property
    def target_ongoing_requests(self) -> int:
        return self.scaling.target_ongoing_requests or max(1, self.limits.max_num_seqs * 3 // 4)

    @property
    def memory_fit(self) -> sizing.MemoryFit:
        return sizing.memory_fit(
            self.model.architecture,
            self.instance,
            self.tensor_parallel_size,
            self.limits.max_model_len,
            self.limits.max_num_seqs,
            self.limits.gpu_memory_utilization,
        )

    @model_validator(mode="after")
    def _check_rules(self) -> ModelDeploymentSpec:
        problems = Problems("ModelDeploymentSpec")
        _check_prefix(problems, ("weights", "prefix"), self.weights.prefix)
        _check_scaling(self, problems)
        if self.limits.block_size not in VLLM_BLOCK_SIZES:
            problems.add(
                ("limits", "block_size"),
                f"block_size {self.limits.block_size} is not a vLLM block size; "
                f"use one of {list(VLLM_BLOCK_SIZES)}",
                self.limits.block_size,
            )
        instance = INSTANCE_TYPES.get(self.instance_type)
        if instance is None or instance.accelerator is Accelerator.NONE:
            accelerated = sorted(
                n for n, t in INSTANCE_TYPES.items() if t.accelerator.value != "none"
            )
            problems.add(
                ("instance_type",),
                f"{self.instance_type!r} is not an accelerator instance type in the catalog; "
                f"use one of {', '.join(accelerated)}",
                self.instance_type,
            )
        else:
            if _check_tensor_parallel(self, instance, problems):
                _check_memory(self, instance, problems)
            _check_accelerator_options(self, instance, problems)
        problems.raise_if_any()
        return self


def _check_prefix(problems: Problems, loc: tuple[str, ...], prefix: str | None) -> None:
    problem = None if prefix is None else key_prefix_problem(prefix, name=" ".join(loc))
    if problem is not None:
        problems.add(loc, problem, prefix)


def _check_scaling(spec: ModelDeploymentSpec, problems: Problems) -> None:
    scaling = spec.scaling
    if scaling.min_replicas > scaling.max_replicas:
        problems.add(
            ("scaling", "min_replicas"),
            f"min_replicas ({scaling.min_replicas}) exceeds max_replicas "
            f"({scaling.max_replicas}); set min_replicas <= max_replicas",
            scaling.min_replicas,
        )
    elif spec.engine == "vllm" and scaling.min_replicas != scaling.max_replicas:
        problems.add(
            ("scaling", "max_replicas"),
            "a standalone vLLM Deployment runs a fixed number of replicas; set max_replicas "
            f"= min_replicas ({scaling.min_replicas}), or use engine: rayservice to autoscale "
            "on queue depth",
            scaling.max_replicas,
        )


def _check_tensor_parallel(
    spec: ModelDeploymentSpec, instance: InstanceType, problems: Problems
) -> bool:
    """Check TP against the topology and the heads; True when TP is usable for sizing."""
    arch = spec.model.architecture
    problem = sizing.tensor_parallel_problem(arch, instance, spec.tensor_parallel_size)
    if problem is None:
        return True
    usable = list(sizing.usable_tensor_parallel(arch, instance)) or "none"
    problems.add(
        ("tensor_parallel_size",),
        f"{problem}; degrees that work for this model on {instance.name}: {usable}",
        spec.tensor_parallel_size,
    )
    return False


def _check_memory(spec: ModelDeploymentSpec, instance: InstanceType, problems: Problems) -> None:
    fit = spec.memory_fit
    if fit.fits:
        return
    arch = spec.model.architecture
    limits = spec.limits
    larger = [
        d
        for d in instance.valid_tensor_parallel
        if d > spec.tensor_parallel_size
        and arch.num_attention_heads % d == 0
        and sizing.memory_fit(
            arch,
            instance,
            d,
            limits.max_model_len,
            limits.max_num_seqs,
            limits.gpu_memory_utilization,
        ).fits
    ]
    seqs = sizing.max_num_seqs_that_fit(
        arch,
        instance,
        spec.tensor_parallel_size,
        limits.max_model_len,
        limits.gpu_memory_utilization,
    )
    fixes = []
    if larger:
        fixes.append(f"tensor_parallel_size {larger[0]}")
    if seqs:
        fixes.append(f"max_num_seqs <= {seqs}")
    if not fixes:
        fixes.append("a larger instance type or a shorter max_model_len")
    problems.add(
        ("tensor_parallel_size",),
        f"weights ({sizing.gib(fit.weight_bytes):.1f} GiB) plus KV cache for "
        f"{limits.max_num_seqs} x {limits.max_model_len} tokens "
        f"({sizing.gib(fit.kv_cache_bytes):.1f} GiB) exceed the "
        f"{sizing.gib(fit.capacity_bytes):.1f} GiB usable on {spec.tensor_parallel_size} "
        f"core(s) of {instance.name}; use {' or '.join(fixes)}",
        spec.tensor_parallel_size,
    )


def _check_accelerator_options(
    spec: ModelDeploymentSpec, instance: InstanceType, problems: Problems
) -> None:
    if spec.weights.loader == "runai_streamer" and (
        spec.engine != "vllm" or instance.accelerator is not Accelerator.NVIDIA
    ):
        problems.add(
            ("weights", "loader"),
            "runai_streamer works only for engine: vllm on a GPU instance; use loader: "
            "mountpoint here",
            spec.weights.loader,
        )
    if instance.accelerator is not Accelerator.NEURON:
        if spec.neuron is not None:
            problems.add(
                ("neuron",),
                f"neuron options apply only to inf2 instance types, not {instance.name}; "
                "remove them",
            )
        return
    options = spec.neuron_options
    for i, bucket in enumerate(options.sequence_buckets):
        if bucket & (bucket - 1) or bucket > spec.limits.max_model_len:
            problems.add(
                ("neuron", "sequence_buckets", i),
                f"bucket {bucket} must be a power of two no larger than max_model_len "
                f"({spec.limits.max_model_len})",
                bucket,
            )
    prefix = options.compiled_artifacts_prefix
    _check_prefix(problems, ("neuron", "compiled_artifacts_prefix"), prefix)
    if prefix is None and not options.allow_compile_at_startup:
        problems.add(
            ("neuron", "compiled_artifacts_prefix"),
            "Neuron serving needs compiled artifacts (compiling in the pod takes ~15 minutes "
            "per replica); set compiled_artifacts_prefix, e.g. neuron-artifacts/, or "
            "allow_compile_at_startup: true for development",
        )
    family = spec.model.architecture.family
    if family in NEURON_POOR_COMPILE_FAMILIES and not options.allow_poor_compile_architecture:
        problems.add(
            ("neuron", "allow_poor_compile_architecture"),
            f"the {family} family fails or compiles poorly on Neuron (mixed attention "
            "configurations); serve it on a GPU instance, or set "
            "allow_poor_compile_architecture: true after testing a compile",
        )
