"""``ModelDeploymentSpec``: what to serve, typed and validated before anything is built.

Every rule of one field lives in that field's type, here or where the type is written (bucket
prefixes in :mod:`eks_inference.specification.aws_types`, Neuron overrides in
:mod:`eks_inference.specification.neuron_overrides`); the rules across fields are
:mod:`eks_inference.specification.deployment_rules`'. A spec that cannot work on its hardware fails
with a
:class:`pydantic.ValidationError` listing every problem at once, field errors and the rules
across fields together, each under its field path and saying what would work.
"""

from __future__ import annotations

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

from eks_inference.catalog import (
    INSTANCE_TYPES,
    MODELS,
    Accelerator,
    InstanceType,
    ModelArchitecture,
    by_size,
    sizing,
)
from eks_inference.specification import engine_registry
from eks_inference.specification.adapters import Adapters
from eks_inference.specification.aws_types import KeyPrefix
from eks_inference.specification.endpoints import DeploymentEndpoint
from eks_inference.specification.engine_registry import EngineName, EngineOptions, options_by_engine
from eks_inference.specification.kv_serving import Disaggregation, KvCacheOffload
from eks_inference.specification.neuron_overrides import NeuronConfigOverrides, NeuronOverrides
from eks_inference.specification.routing import Routing
from eks_inference.specification.validation import (
    Problems,
    RuleBook,
    SpecModel,
    rule_error,
    validate_with_rules,
)
from eks_inference.specification.weights import Weights

VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
# Upper bounds of the spec's counts, far beyond any deployment this library sizes: an absurd
# value (thousands of digits, a few zeros too many) fails as a field error instead of flowing
# into sizing arithmetic and messages thousands of characters long.
MAX_MODEL_LEN = 2**24  # tokens; the longest context a released model claims is 10M
MAX_NUM_SEQS = 2**16  # sequences per replica, 256 times vLLM's default batch
MAX_REPLICAS = 10_000  # per deployment, far beyond what one node pool holds


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


MAX_NODES_PER_REPLICA = 64  # far beyond the largest published group (8 nodes)


class MultiNode(BaseModel):
    """One model replica across several nodes (engines that serve across nodes, ``engine:
    vllm`` on GPUs): a LeaderWorkerSet group of ``nodes_per_replica`` pods, one per node.

    The spec counts nodes, not pipeline stages, because nodes are what the pool holds, the
    plan prices and the group is made of; the parallel layout follows from them: tensor
    parallelism over all of one node's GPUs (its all-reduce on every layer needs NVLink or the
    node's PCIe switches, not the network) and one pipeline stage per node
    (``--pipeline-parallel-size = nodes_per_replica``), whose hand-over between nodes is one
    activation per token. ``allow_without_efa`` admits an instance type without Elastic Fabric
    Adapter (TCP between the stages, a bandwidth the plan warns about); off by default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes_per_replica: int = Field(ge=2, le=MAX_NODES_PER_REPLICA)
    allow_without_efa: bool = Field(
        default=False,
        description="Serve across nodes of an instance type without EFA (stages talk TCP).",
    )


class ModelDeploymentSpec(SpecModel):
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
    adapters: Adapters | None = Field(
        default=None,
        description="LoRA adapters of the model served beside it, from a bucket prefix "
        "(engines with adapters: vllm and kserve on GPUs); absent: the base model only.",
    )
    routing: Routing | None = Field(
        default=None,
        description="Which replica serves a request: absent or picker: round_robin, the load "
        "balancer's round robin; prefix_cache or kv_cache_load, the Inference Extension's "
        "endpoint picker (engine: vllm on GPUs).",
    )
    multi_node: MultiNode | None = Field(
        default=None,
        description="One replica across several nodes (engine: vllm on GPUs); absent: one "
        "node at most.",
    )

    @property
    def nodes_per_replica(self) -> int:
        """Nodes one replica occupies: ``multi_node.nodes_per_replica``, else 1."""
        return self.multi_node.nodes_per_replica if self.multi_node is not None else 1

    @property
    def pipeline_parallel_size(self) -> int:
        """Pipeline stages of a replica: one per node (see :class:`MultiNode`)."""
        return self.nodes_per_replica

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
        """Nodes the deployment occupies at ``max_replicas`` (each replica's whole group)."""
        return (
            sizing.nodes_needed(self.scaling.max_replicas, self.replicas_per_node)
            * self.nodes_per_replica
        )

    @property
    def rollout_headroom_replicas(self) -> int:
        """Replicas a rollout runs beside the current ones, as the engine rolls out.

        A vLLM Deployment surges one pod before it removes an old one (no capacity is lost
        during an update); a RayService upgrade starts a new Ray cluster at ``min_replicas``
        workers and switches traffic only once it serves.
        """
        return engine_registry.ENGINES.named(self.engine).rollout_headroom_replicas(self)

    @property
    def nodes_during_rollout(self) -> int:
        """Nodes needed while a rollout runs at ``max_replicas``: the pool must hold this."""
        return (
            sizing.nodes_needed(
                self.scaling.max_replicas + self.rollout_headroom_replicas, self.replicas_per_node
            )
            * self.nodes_per_replica
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
            self.adapter_bytes,
            self.pipeline_parallel_size,
        )

    @property
    def adapter_bytes(self) -> int:
        """GPU memory of the adapter slots over a tensor-parallel group (0 without adapters):
        ``max_loras`` slots of ``max_lora_rank``
        (:func:`~eks_inference.catalog.sizing.lora_slot_bytes`)."""
        adapters = self.adapters
        if adapters is None or self.model.architecture.intermediate_size is None:
            return 0
        return adapters.max_loras * sizing.lora_slot_bytes(
            self.model.architecture,
            self.instance,
            self.tensor_parallel_size,
            adapters.max_lora_rank,
        )

    @model_validator(mode="wrap")
    @classmethod
    def _check_rules(
        cls, data: Any, handler: ModelWrapValidatorHandler[ModelDeploymentSpec]
    ) -> ModelDeploymentSpec:
        return validate_with_rules(cls, data, handler, DEPLOYMENT_RULES.of)


#: The rules across a deployment's fields, written by
#: :mod:`~eks_inference.specification.deployment_rules` (which the package imports first).
DEPLOYMENT_RULES: RuleBook[ModelDeploymentSpec] = RuleBook("ModelDeploymentSpec")
