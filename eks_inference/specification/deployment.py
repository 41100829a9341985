"""``ModelDeploymentSpec``: what to serve, typed and validated before anything is built.

Every rule a deployment must satisfy lives here, or in the type of the field it concerns
(bucket prefixes in :mod:`eks_inference.aws_types`, Neuron overrides in
:mod:`eks_inference.specification.neuron_overrides`). A spec that cannot work on its hardware fails
with a
:class:`pydantic.ValidationError` listing every problem at once, field errors and the rules
across fields together, each under its field path and saying what would work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PositiveInt,
    model_validator,
)

from eks_inference.aws_types import KeyPrefix
from eks_inference.catalog import (
    INSTANCE_TYPES,
    MODELS,
    NEURON_POOR_COMPILE_FAMILIES,
    Accelerator,
    InstanceType,
    ModelArchitecture,
    by_size,
    sizing,
)
from eks_inference.specification.endpoints import DeploymentEndpoint
from eks_inference.specification.engine_rules import (
    FIELD_NEED_RULES,
    engine_rules,
    supported_accelerator_problem,
    supported_loader_problem,
)
from eks_inference.specification.engines import (
    EngineName,
    EngineOptions,
    engine_of,
    options_by_engine,
)
from eks_inference.specification.kv_serving import Disaggregation, KvCacheOffload, check_kv_cache
from eks_inference.specification.neuron_overrides import NeuronConfigOverrides, NeuronOverrides
from eks_inference.specification.validation import Problems, Rule, rule_error, validate_with_rules
from eks_inference.specification.weights import Weights
from eks_inference.specification.weights_rules import image_size_problem, mountpoint_cache_problem

VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
# Upper bounds of the spec's counts, far beyond any deployment this library sizes: an absurd
# value (thousands of digits, a few zeros too many) fails as a field error instead of flowing
# into sizing arithmetic and messages thousands of characters long.
MAX_MODEL_LEN = 2**24  # tokens; the longest context a released model claims is 10M
MAX_NUM_SEQS = 2**16  # sequences per replica, 256 times vLLM's default batch
MAX_REPLICAS = 10_000  # per deployment, far beyond what one node pool holds
# Instance types named where a model fits, one per family, cheapest first: enough to choose
# from, on one line.
_MAX_LISTED_INSTANCES = 4


def _vllm_block_size(value: int) -> int:
    if value not in VLLM_BLOCK_SIZES:
        raise rule_error(
            f"block_size {value} is not a vLLM block size; use one of {list(VLLM_BLOCK_SIZES)}"
        )
    return value


def _power_of_two(bucket: int) -> int:
    if bucket & (bucket - 1):
        below = 1 << (bucket.bit_length() - 1)
        raise rule_error(f"bucket {bucket} is not a power of two; use {below} or {below * 2}")
    return bucket


def _accelerator_instance_type(name: str) -> str:
    instance = INSTANCE_TYPES.get(name)
    if instance is None or instance.accelerator is Accelerator.NONE:
        accelerated = sorted(
            (n for n, t in INSTANCE_TYPES.items() if t.accelerator is not Accelerator.NONE),
            key=by_size,
        )
        raise rule_error(
            f"{name!r} is not an accelerator instance type in the catalog; use one of "
            f"{', '.join(accelerated)}"
        )
    return name


AcceleratorInstanceType = Annotated[str, AfterValidator(_accelerator_instance_type)]
"""A catalog instance type with accelerators (Inferentia2 or NVIDIA)."""
SequenceBucket = Annotated[int, Field(ge=1, le=MAX_MODEL_LEN), AfterValidator(_power_of_two)]
"""A Neuron sequence bucket: a power of two, in tokens."""


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

    max_model_len: int = Field(default=4096, ge=1, le=MAX_MODEL_LEN)
    max_num_seqs: int = Field(default=32, ge=1, le=MAX_NUM_SEQS)
    block_size: Annotated[int, AfterValidator(_vllm_block_size)] = Field(
        default=16, description=f"KV block size, one of {VLLM_BLOCK_SIZES}."
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=0.98,
        description="GPUs only: share of GPU memory vLLM may use for weights and KV cache.",
    )


class Scaling(BaseModel):
    """Replica bounds and the queue-depth target Ray Serve scales on.

    ``target_ongoing_requests`` defaults to three quarters of ``max_num_seqs``: a replica
    scales out before its batch is full, so requests rarely wait in a queue. ``autoscale``
    applies to engines with the
    :class:`~eks_inference.specification.capabilities.QueueAutoscaling` capability (standalone
    vLLM; Ray Serve and KServe always scale between the bounds): it gives the servers a KEDA
    autoscaler on the engine's queue depth and KV-cache use, fed by the cluster's Prometheus.
    Off by default, so a standalone Deployment stays a fixed size unless the metrics pipeline
    is asked for. ``min_replicas: 0`` is for engines with the
    :class:`~eks_inference.specification.capabilities.ScaleToZero` capability (Ray Serve,
    KServe).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    max_replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    target_ongoing_requests: int | None = Field(default=None, ge=1, le=MAX_NUM_SEQS)
    autoscale: bool = Field(
        default=False,
        description="Engines that scale on their queue (engine: vllm): scale the servers "
        "between min_replicas and max_replicas with KEDA on queue depth and KV-cache use "
        "(Prometheus).",
    )

    @model_validator(mode="after")
    def _check_range(self) -> Scaling:
        if self.min_replicas > self.max_replicas:
            problems = Problems("Scaling")
            problems.add(
                ("min_replicas",),
                f"min_replicas ({self.min_replicas}) exceeds max_replicas "
                f"({self.max_replicas}); set min_replicas <= max_replicas",
                self.min_replicas,
            )
            problems.raise_if_any()
        return self


class NeuronOptions(BaseModel):
    """Inferentia2 options: where compiled artifacts live and the shapes compiled for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compiled_artifacts_prefix: KeyPrefix | None = Field(
        default=None,
        description="Bucket prefix under which compiled artifacts are kept, ending '/'.",
    )
    sequence_buckets: tuple[SequenceBucket, ...] = Field(
        default=(),
        max_length=64,
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
    overrides: NeuronOverrides = Field(
        default_factory=NeuronConfigOverrides,
        description="Extra override_neuron_config entries (NeuronConfig keys this library "
        "allows, each with its type); they change the compiled graph.",
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

    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_extra=lambda schema: options_by_engine(schema)
    )

    name: str = Field(
        pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
        max_length=40,
        description="DNS-1123 label; prefixes every Kubernetes object of the deployment.",
    )
    model: CatalogOrExplicitModel
    instance_type: AcceleratorInstanceType
    engine: EngineName = "rayservice"
    options: EngineOptions = Field(
        default=None,
        validate_default=True,
        description="The engine's own options, as its options model types them (engine: "
        "triton: the model repository it serves; engine: kserve: the Knative settings).",
    )
    tensor_parallel_size: PositiveInt = 1
    limits: Limits = Limits()
    scaling: Scaling = Scaling()
    weights: Weights
    neuron: NeuronOptions | None = None
    endpoint: DeploymentEndpoint = Field(
        default_factory=DeploymentEndpoint,
        description="Whether and where the deployment is reached on the platform's load "
        "balancer (see PlatformSpec.endpoint).",
    )
    kv_cache: KvCacheOffload | None = Field(
        default=None,
        description="KV-cache tiers beyond GPU memory (LMCache): host memory, then local NVMe.",
    )
    disaggregation: Disaggregation | None = Field(
        default=None,
        description="Prefill and decode workers apart (engine: dynamo); absent: aggregated.",
    )

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
        """Replicas a rollout runs beside the current ones, as the engine rolls out.

        A vLLM Deployment surges one pod before it removes an old one (no capacity is lost
        during an update); a RayService upgrade starts a new Ray cluster at ``min_replicas``
        workers and switches traffic only once it serves.
        """
        return engine_of(self).rollout_headroom_replicas(self)

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

    @model_validator(mode="wrap")
    @classmethod
    def _check_rules(
        cls, data: Any, handler: ModelWrapValidatorHandler[ModelDeploymentSpec]
    ) -> ModelDeploymentSpec:
        return validate_with_rules(cls, data, handler, _rules_of)


def _check_context_length(spec: ModelDeploymentSpec, problems: Problems) -> None:
    context = spec.model.architecture.context_length_problem(spec.limits.max_model_len)
    if context is not None:
        problems.add(("limits", "max_model_len"), context, spec.limits.max_model_len)


def _fitting_degrees(spec: ModelDeploymentSpec, instance: InstanceType) -> list[int]:
    """Degrees of ``instance`` that run the model and hold it at the spec's limits."""
    arch, limits = spec.model.architecture, spec.limits
    return [
        d
        for d in sizing.usable_tensor_parallel(arch, instance)
        if sizing.memory_fit(
            arch,
            instance,
            d,
            limits.max_model_len,
            limits.max_num_seqs,
            limits.gpu_memory_utilization,
        ).fits
    ]


def _where_it_fits(spec: ModelDeploymentSpec) -> str:
    """The cheapest catalog instance type of each family that holds the model at its limits.

    Named with their smallest fitting degree, for a model that no degree of the chosen
    instance holds: the fix is another instance type, not another degree.
    """
    fitting: dict[str, str] = {}
    for instance in sorted(INSTANCE_TYPES.values(), key=lambda t: (t.price_per_hour, t.name)):
        if instance.accelerator is Accelerator.NONE or instance.family in fitting:
            continue
        degrees = _fitting_degrees(spec, instance)
        if degrees:
            fitting[instance.family] = f"{instance.name} (TP {degrees[0]})"
    if not fitting:
        return (
            "a shorter max_model_len or a smaller max_num_seqs: no instance type of the "
            "catalog holds it at these limits"
        )
    listed = list(fitting.values())[:_MAX_LISTED_INSTANCES]
    return f"a larger instance type where it fits: {', '.join(listed)}"


def _check_fit(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The degree runs on the topology (and the heads), and the TP group holds the model."""
    instance = spec.instance
    arch = spec.model.architecture
    limits = spec.limits
    fitting = _fitting_degrees(spec, instance)
    problem = sizing.tensor_parallel_problem(arch, instance, spec.tensor_parallel_size)
    if problem is not None:
        hint = (
            f"degrees that work for this model on {instance.name}: {fitting}"
            if fitting
            else f"no degree of {instance.name} holds this model; use {_where_it_fits(spec)}"
        )
        problems.add(("tensor_parallel_size",), f"{problem}; {hint}", spec.tensor_parallel_size)
        return
    fit = spec.memory_fit
    if fit.fits:
        return
    larger = [d for d in fitting if d > spec.tensor_parallel_size]
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
    if not fitting:
        fixes.append(_where_it_fits(spec))
    padding = (
        f" + {sizing.gib(fit.padding_bytes):.1f} GiB of padded and replicated heads"
        if fit.padding_bytes
        else ""
    )
    problems.add(
        ("tensor_parallel_size",),
        f"weights ({sizing.gib(fit.weight_bytes):.1f} GiB{padding}) plus KV cache for "
        f"{limits.max_num_seqs} x {limits.max_model_len} tokens "
        f"({sizing.gib(fit.kv_cache_bytes):.1f} GiB) exceed the "
        f"{sizing.gib(fit.capacity_bytes):.1f} GiB usable on "
        f"{sizing.accelerator_units(instance, spec.tensor_parallel_size)} of {instance.name}; "
        f"use {' or '.join(fixes)}",
        spec.tensor_parallel_size,
    )


def _check_gpu_only_limits(spec: ModelDeploymentSpec, problems: Problems) -> None:
    # On Neuron any other value would be silently ignored: the sizing and the engine use the
    # Neuron runtime's fixed share instead. The default itself is accepted, since a spec
    # copied through model_dump() carries it explicitly without asking for anything.
    default = Limits.model_fields["gpu_memory_utilization"].default
    if spec.on_neuron and spec.limits.gpu_memory_utilization != default:
        problems.add(
            ("limits", "gpu_memory_utilization"),
            f"gpu_memory_utilization applies to GPUs only; on {spec.instance_type} the model "
            f"gets a fixed {sizing.NEURON_USABLE_MEMORY_FRACTION:.0%} of each NeuronCore's "
            "memory: remove it",
            spec.limits.gpu_memory_utilization,
        )


def _check_neuron_only_on_inf2(spec: ModelDeploymentSpec, problems: Problems) -> None:
    if spec.neuron is not None and not spec.on_neuron:
        problems.add(
            ("neuron",),
            f"neuron options apply only to inf2 instance types, not {spec.instance_type}; "
            "remove them",
        )


def _check_neuron_buckets(spec: ModelDeploymentSpec, problems: Problems) -> None:
    if not spec.on_neuron:
        return
    options = spec.neuron_options
    max_model_len = spec.limits.max_model_len
    for i, bucket in enumerate(options.sequence_buckets):
        if bucket > max_model_len:
            problems.add(
                ("neuron", "sequence_buckets", i),
                f"bucket {bucket} exceeds max_model_len ({max_model_len}); drop it or raise "
                "max_model_len",
                bucket,
            )
    overridden = (
        ("context_encoding_buckets", options.overrides.get("context_encoding_buckets", [])),
        ("token_generation_buckets", options.overrides.get("token_generation_buckets", [])),
    )
    for key, buckets in overridden:
        # NxD Inference refuses a bucket beyond the context when it compiles, hours later.
        too_long = [b for b in buckets if b > max_model_len]
        if too_long:
            problems.add(
                ("neuron", "overrides", key),
                f"buckets {too_long} exceed max_model_len ({max_model_len})",
                too_long,
            )


def _check_compiled_artifacts(spec: ModelDeploymentSpec, problems: Problems) -> None:
    options = spec.neuron_options
    if (
        spec.on_neuron
        and options.compiled_artifacts_prefix is None
        and not options.allow_compile_at_startup
    ):
        problems.add(
            ("neuron", "compiled_artifacts_prefix"),
            "Neuron serving needs compiled artifacts (compiling in the pod takes ~15 minutes "
            "per replica); set compiled_artifacts_prefix, e.g. neuron-artifacts/, or "
            "allow_compile_at_startup: true for development",
        )


def _check_poor_compile_architecture(spec: ModelDeploymentSpec, problems: Problems) -> None:
    family = spec.model.architecture.family
    if (
        spec.on_neuron
        and family in NEURON_POOR_COMPILE_FAMILIES
        and not spec.neuron_options.allow_poor_compile_architecture
    ):
        problems.add(
            ("neuron", "allow_poor_compile_architecture"),
            f"the {family} family fails or compiles poorly on Neuron (mixed attention "
            "configurations); serve it on a GPU instance, or set "
            "allow_poor_compile_architecture: true after testing a compile",
        )


def _rule(
    reads: str, check: Callable[[ModelDeploymentSpec, Problems], None]
) -> Rule[ModelDeploymentSpec]:
    return Rule(frozenset(reads.split()), check)


# The rules across fields, each with every field it reads, down to the field of a nested model
# where it reads only some (properties included: ``instance`` and ``on_neuron`` read
# instance_type, ``memory_fit`` the model, instance, degree and three limits). Rules of one
# field are part of its type, above, so a field error never hides them.
_LIMITS_SIZED = "limits.max_model_len limits.max_num_seqs limits.gpu_memory_utilization"
_RULES = (
    _rule("engine instance_type", supported_accelerator_problem),
    _rule("model limits.max_model_len", _check_context_length),
    _rule(f"model instance_type tensor_parallel_size {_LIMITS_SIZED}", _check_fit),
    _rule("weights.loader engine instance_type", supported_loader_problem),
    _rule("weights.loader model", image_size_problem),
    _rule("weights.cache_gib instance_type", mountpoint_cache_problem),
    _rule("instance_type limits.gpu_memory_utilization", _check_gpu_only_limits),
    _rule("instance_type neuron", _check_neuron_only_on_inf2),
    _rule(
        "instance_type neuron.sequence_buckets neuron.overrides limits.max_model_len",
        _check_neuron_buckets,
    ),
    _rule(
        "instance_type neuron.compiled_artifacts_prefix neuron.allow_compile_at_startup",
        _check_compiled_artifacts,
    ),
    _rule(
        "instance_type model neuron.allow_poor_compile_architecture",
        _check_poor_compile_architecture,
    ),
    _rule("kv_cache engine instance_type model tensor_parallel_size", check_kv_cache),
    *FIELD_NEED_RULES,
)


def _rules_of(spec: ModelDeploymentSpec) -> tuple[Rule[ModelDeploymentSpec], ...]:
    """The rules every spec follows, then those of the engine it names."""
    return (*_RULES, *engine_rules(spec))
