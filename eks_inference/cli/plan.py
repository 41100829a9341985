"""``plan``: memory fit, decode throughput bound and cost, as plain data (no printing).

The numbers come from :mod:`eks_inference.sizing`, the same code the spec validates with. The
throughput is a memory-bandwidth *bound* (one node, all replicas), not a benchmark: a measured
rate, when given, replaces it in the cost per million tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from eks_inference import sizing
from eks_inference.catalog import INSTANCE_TYPES, Accelerator, InstanceType, ModelArchitecture
from eks_inference.platform import PlatformSpec
from eks_inference.spec import Limits, ModelDeploymentSpec

# A configuration planned without a spec uses a deployment's default limits.
_DEFAULTS = Limits()
DEFAULT_MAX_MODEL_LEN = _DEFAULTS.max_model_len
DEFAULT_MAX_NUM_SEQS = _DEFAULTS.max_num_seqs
DEFAULT_GPU_MEMORY_UTILIZATION = _DEFAULTS.gpu_memory_utilization


@dataclass(frozen=True)
class ConfigurationPlan:
    """One model on one instance type at one tensor-parallel degree and batch shape."""

    model: str
    instance_type: str
    accelerator: str
    tensor_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    fits: bool
    weights_gib: float
    kv_cache_gib: float
    required_gib: float
    accelerator_memory_gib: float
    usable_memory_gib: float
    replicas_per_node: int
    decode_tokens_per_second_bound: float
    price_per_hour: float
    price_source: Literal["catalog", "given"]
    tokens_per_second: float
    throughput_source: Literal["bound", "measured"]
    cost_per_million_tokens: float

    @property
    def memory_utilization(self) -> float:
        """Weights plus worst-case KV cache as a share of the TP group's memory."""
        return self.required_gib / self.accelerator_memory_gib

    @property
    def label(self) -> str:
        """``inf2.48xlarge TP8``: how plots and tables name the configuration."""
        return f"{self.instance_type} TP{self.tensor_parallel_size}"

    def as_json(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict, one key per field."""
        return asdict(self)


def plan_configuration(
    model_name: str,
    model: ModelArchitecture,
    instance: InstanceType,
    tensor_parallel_size: int,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
    *,
    price_per_hour: float | None = None,
    measured_tokens_per_second: float | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
) -> ConfigurationPlan:
    """Size one configuration. ``tensor_parallel_size`` must be usable (see above).

    The cost per million tokens uses ``measured_tokens_per_second`` when given (a benchmark of
    one node), otherwise the decode bound, and the catalog price unless ``price_per_hour``.
    """
    fit = sizing.memory_fit(
        model,
        instance,
        tensor_parallel_size,
        max_model_len,
        max_num_seqs,
        gpu_memory_utilization,
    )
    bound = sizing.decode_tokens_per_second_bound(
        model, instance, tensor_parallel_size, max_model_len, max_num_seqs
    )
    price = instance.price_per_hour if price_per_hour is None else price_per_hour
    rate = bound if measured_tokens_per_second is None else measured_tokens_per_second
    return ConfigurationPlan(
        model=model_name,
        instance_type=instance.name,
        accelerator=instance.accelerator_model,
        tensor_parallel_size=tensor_parallel_size,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        fits=fit.fits,
        weights_gib=sizing.gib(fit.weight_bytes),
        kv_cache_gib=sizing.gib(fit.kv_cache_bytes),
        required_gib=sizing.gib(fit.required_bytes),
        accelerator_memory_gib=sizing.gib(fit.group_memory_bytes),
        usable_memory_gib=sizing.gib(fit.capacity_bytes),
        replicas_per_node=sizing.replicas_per_node(instance, tensor_parallel_size),
        decode_tokens_per_second_bound=bound,
        price_per_hour=price,
        price_source="catalog" if price_per_hour is None else "given",
        tokens_per_second=rate,
        throughput_source="bound" if measured_tokens_per_second is None else "measured",
        cost_per_million_tokens=sizing.cost_per_million_tokens(price, rate),
    )


def candidates(
    model_name: str,
    model: ModelArchitecture,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> list[ConfigurationPlan]:
    """One configuration per catalog accelerator instance type on which the model fits.

    Per instance the cheapest usable degree per million tokens wins, the smallest on a tie: the
    node's bandwidth bound barely depends on TP (more replicas of smaller groups), and smaller
    groups give more independent replicas per node. Sorted by cost per million tokens.
    """
    found = []
    for instance in INSTANCE_TYPES.values():
        if instance.accelerator is Accelerator.NONE:
            continue
        plans = [
            plan_configuration(model_name, model, instance, tp, max_model_len, max_num_seqs)
            for tp in sizing.usable_tensor_parallel(model, instance)
        ]
        fitting = [p for p in plans if p.fits]
        if fitting:
            found.append(min(fitting, key=_cheapest_then_smallest))
    return sorted(found, key=lambda p: (p.cost_per_million_tokens, p.instance_type))


def _cheapest_then_smallest(plan: ConfigurationPlan) -> tuple[float, int]:
    # Rounded so that float noise between degrees with equal bounds does not decide the tie.
    return round(plan.cost_per_million_tokens, 9), plan.tensor_parallel_size


@dataclass(frozen=True)
class DeploymentPlan:
    """A deployment of the platform: its configuration and what its node range costs."""

    name: str
    engine: str
    configuration: ConfigurationPlan
    nodes_min: int
    nodes_max: int

    @property
    def price_per_hour_min(self) -> float:
        """USD per hour with the deployment at its fewest nodes."""
        return self.nodes_min * self.configuration.price_per_hour

    @property
    def price_per_hour_max(self) -> float:
        """USD per hour with the deployment at its most nodes."""
        return self.nodes_max * self.configuration.price_per_hour

    def as_json(self) -> dict[str, Any]:
        """The deployment's scaling and cost, then its configuration's fields."""
        return {
            "name": self.name,
            "engine": self.engine,
            "nodes_min": self.nodes_min,
            "nodes_max": self.nodes_max,
            "price_per_hour_min": self.price_per_hour_min,
            "price_per_hour_max": self.price_per_hour_max,
            **self.configuration.as_json(),
        }


@dataclass(frozen=True)
class PoolPlan:
    """A node pool's size range and what it costs per hour at either end."""

    name: str
    instance_type: str
    capacity_type: str
    min_size: int
    max_size: int
    price_per_hour: float

    @property
    def price_per_hour_min(self) -> float:
        """USD per hour with the pool at ``min_size``."""
        return self.min_size * self.price_per_hour

    @property
    def price_per_hour_max(self) -> float:
        """USD per hour with the pool at ``max_size``."""
        return self.max_size * self.price_per_hour


@dataclass(frozen=True)
class PlatformPlan:
    """Every deployment and node pool of a platform file."""

    deployments: tuple[DeploymentPlan, ...]
    pools: tuple[PoolPlan, ...]

    @property
    def price_per_hour_min(self) -> float:
        """USD per hour with every pool at ``min_size``."""
        return sum(p.price_per_hour_min for p in self.pools)

    @property
    def price_per_hour_max(self) -> float:
        """USD per hour with every pool at ``max_size``."""
        return sum(p.price_per_hour_max for p in self.pools)

    def as_json(self) -> dict[str, Any]:
        """Deployments, node pools and the cluster's hourly range as a JSON-ready dict."""
        return {
            "deployments": [d.as_json() for d in self.deployments],
            "node_pools": [
                {
                    **asdict(p),
                    "price_per_hour_min": p.price_per_hour_min,
                    "price_per_hour_max": p.price_per_hour_max,
                }
                for p in self.pools
            ],
            "price_per_hour_min": self.price_per_hour_min,
            "price_per_hour_max": self.price_per_hour_max,
        }


def plan_deployment(spec: ModelDeploymentSpec) -> DeploymentPlan:
    """Size a validated deployment with its own limits and scaling."""
    per_node = spec.replicas_per_node
    return DeploymentPlan(
        name=spec.name,
        engine=spec.engine,
        configuration=plan_configuration(
            spec.model.id,
            spec.model.architecture,
            spec.instance,
            spec.tensor_parallel_size,
            spec.limits.max_model_len,
            spec.limits.max_num_seqs,
            gpu_memory_utilization=spec.limits.gpu_memory_utilization,
        ),
        nodes_min=sizing.nodes_needed(spec.scaling.min_replicas, per_node),
        nodes_max=sizing.nodes_needed(spec.scaling.max_replicas, per_node),
    )


def plan_platform(platform: PlatformSpec) -> PlatformPlan:
    """Plan every deployment and price every node pool of a platform."""
    return PlatformPlan(
        deployments=tuple(plan_deployment(d) for d in platform.deployments),
        pools=tuple(
            PoolPlan(
                name=pool.name,
                instance_type=pool.instance.name,
                capacity_type=pool.capacity_type,
                min_size=pool.min_size,
                max_size=pool.max_size,
                price_per_hour=pool.instance.price_per_hour,
            )
            for pool in platform.node_pools
        ),
    )
