"""``plan``: memory fit, decode throughput bound and cost, as plain data (no printing).

The numbers come from :mod:`eks_inference.catalog.sizing`, the same code the spec validates with.
The
throughput is a memory-bandwidth *bound* (one node, all replicas), not a benchmark: a measured
rate, when given, replaces it in the cost per million tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from eks_inference.catalog import (
    INSTANCE_TYPES,
    Accelerator,
    InstanceType,
    ModelArchitecture,
    sizing,
)
from eks_inference.catalog.node_hardware import node_hardware
from eks_inference.catalog.spot_prices import SCARCE_SPOT_FAMILIES, SPOT_PRICES
from eks_inference.observability.signals import Watch, signals_of
from eks_inference.ops.deployment_sections import (
    AdapterSlots,
    KvTier,
    SplitPlan,
    adapter_slots,
    kv_tiers,
    split_plan,
)
from eks_inference.ops.errors import BadInput
from eks_inference.ops.scale_to_zero import DEFAULT_IDLE_HOURS, ScaleToZero, scale_to_zero
from eks_inference.specification.cold_start import (
    ColdStart,
    Recommendation,
    cold_start,
    cold_starts,
    recommended_loader,
)
from eks_inference.specification.deployment import Limits, ModelDeploymentSpec
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.routes import key_in_clear_warnings
from eks_inference.specification.routing_rules import one_replica_notes

# A configuration planned without a spec uses a deployment's default limits.
_DEFAULTS = Limits()
DEFAULT_MAX_MODEL_LEN = _DEFAULTS.max_model_len
DEFAULT_MAX_NUM_SEQS = _DEFAULTS.max_num_seqs
DEFAULT_GPU_MEMORY_UTILIZATION = _DEFAULTS.gpu_memory_utilization
# Instance families whose on-demand capacity is rarely there to launch: EC2 sells them through
# On-Demand Capacity Reservations and Capacity Blocks for ML (the P5 and P5en pages).
CAPACITY_RESERVED_FAMILIES = frozenset({"p5", "p5en"})
PriceSource = Literal["catalog", "given", "spot", "spot given"]
"""Where a node price comes from: the on-demand catalog, ``--price-per-hour``, the catalog's
spot prices, or ``--spot-price``."""


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
    padding_gib: float
    kv_cache_gib: float
    required_gib: float
    accelerator_memory_gib: float
    usable_memory_gib: float
    replicas_per_node: int
    decode_tokens_per_second_bound: float
    price_per_hour: float
    price_source: PriceSource
    tokens_per_second: float
    throughput_source: Literal["bound", "measured"]
    cost_per_million_tokens: float
    # A replica across nodes (multi_node): its nodes, and all their accelerators; memory is the
    # group's, the price per node, and the cost per million tokens the group's.
    nodes_per_replica: int = 1
    accelerators_per_replica: int = 0

    @property
    def memory_utilization(self) -> float:
        """Weights, head padding and worst-case KV cache as a share of the TP group's memory."""
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
    price_source: PriceSource | None = None,
    adapter_bytes: int = 0,
    nodes_per_replica: int = 1,
) -> ConfigurationPlan:
    """Size one configuration. ``tensor_parallel_size`` must be usable (see above).

    The cost per million tokens uses ``measured_tokens_per_second`` when given (a benchmark of
    one node), otherwise the decode bound, and the catalog price unless ``price_per_hour``
    (whose origin ``price_source`` names; default ``given``). ``adapter_bytes`` of LoRA slots
    are part of the fit, as the weights are. Raises :class:`BadInput` when ``max_model_len``
    exceeds the model's context.

    With ``nodes_per_replica`` above 1 the replica is a group of that many nodes, one
    pipeline stage each: memory is the group's, and the decode bound stays that of one token
    through every stage in turn (each node streams its share of the weights and KV cache at
    its own bandwidth, one stage after another), which pipelining several batches can only
    raise; the cost per million tokens pays for every node of the group.
    """
    _require_supported_context(model, max_model_len)
    fit = sizing.memory_fit(
        model,
        instance,
        tensor_parallel_size,
        max_model_len,
        max_num_seqs,
        gpu_memory_utilization,
        adapter_bytes,
        nodes_per_replica,
    )
    bound = sizing.decode_tokens_per_second_bound(
        model, instance, tensor_parallel_size, max_model_len, max_num_seqs
    )
    price = instance.price_per_hour if price_per_hour is None else price_per_hour
    if price_source is None:
        price_source = "catalog" if price_per_hour is None else "given"
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
        padding_gib=sizing.gib(fit.padding_bytes),
        kv_cache_gib=sizing.gib(fit.kv_cache_bytes),
        required_gib=sizing.gib(fit.required_bytes),
        accelerator_memory_gib=sizing.gib(fit.group_memory_bytes),
        usable_memory_gib=sizing.gib(fit.capacity_bytes),
        replicas_per_node=sizing.replicas_per_node(instance, tensor_parallel_size),
        decode_tokens_per_second_bound=bound,
        price_per_hour=price,
        price_source=price_source,
        tokens_per_second=rate,
        throughput_source="bound" if measured_tokens_per_second is None else "measured",
        cost_per_million_tokens=sizing.cost_per_million_tokens(price * nodes_per_replica, rate),
        nodes_per_replica=nodes_per_replica,
        accelerators_per_replica=tensor_parallel_size * nodes_per_replica,
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
    Raises :class:`BadInput` when ``max_model_len`` exceeds the model's context.
    """
    _require_supported_context(model, max_model_len)
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


def fitting_degree(
    selected: ConfigurationPlan, arch: ModelArchitecture, instance: InstanceType
) -> int | None:
    """The smallest larger tensor-parallel degree at which ``selected`` would fit, if any."""
    fitting = sizing.fitting_tensor_parallel(
        arch, instance, selected.max_model_len, selected.max_num_seqs
    )
    return next((d for d in fitting if d > selected.tensor_parallel_size), None)


def _require_supported_context(model: ModelArchitecture, max_model_len: int) -> None:
    problem = model.context_length_problem(max_model_len)
    if problem is not None:
        raise BadInput(problem)


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
    # What to watch once it serves, and the thresholds the alerts and autoscaler act on.
    watch: tuple[Watch, ...] = ()
    # Per replica, with kv_cache: the KV cache's tiers and the tokens each holds.
    kv_tiers: tuple[KvTier, ...] = ()
    # Per replica, with adapters: the LoRA slots and the KV tokens they cost.
    adapters: AdapterSlots | None = None
    # How long a replica takes from a new node to serving with its loader, with every loader
    # its engine supports there, and the loader the design documents' rule recommends.
    cold_start: ColdStart | None = None
    cold_starts: tuple[ColdStart, ...] = ()
    recommendation: Recommendation | None = None
    # With min_replicas 0 on an engine that scales to zero: the first request's wait and
    # what idle time saves (eks_inference.ops.scale_to_zero).
    scale_to_zero: ScaleToZero | None = None
    # Served with prefill and decode apart: the split and its cost beside aggregated.
    split: SplitPlan | None = None

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
            "watch": [asdict(w) for w in self.watch],
            "kv_tiers": [asdict(t) for t in self.kv_tiers],
            "adapters": asdict(self.adapters) if self.adapters else None,
            "cold_start": self.cold_start.as_json() if self.cold_start else None,
            "cold_start_by_loader": [c.as_json() for c in self.cold_starts],
            "recommended_loader": asdict(self.recommendation) if self.recommendation else None,
            "scale_to_zero": self.scale_to_zero.as_json() if self.scale_to_zero else None,
            "split": asdict(self.split) if self.split else None,
        }


@dataclass(frozen=True)
class NodePrice:
    """What one node of a pool costs per hour, and where the price comes from."""

    per_hour: float
    source: PriceSource


def node_price(pool: NodePool, spot_prices: Mapping[str, float] | None = None) -> NodePrice:
    """The hourly price of one node of ``pool`` at its ``capacity_type``.

    Spot is priced from ``spot_prices`` (``--spot-price``) or else the catalog's dated spot
    prices (:mod:`eks_inference.catalog.spot_prices`); an instance type with neither is priced
    on-demand (:func:`plan_warnings` says so). Reserved capacity is billed at the on-demand
    rate whether it runs or not.
    """
    instance = pool.instance
    if pool.capacity_type == "SPOT":
        if spot_prices is not None and instance.name in spot_prices:
            return NodePrice(spot_prices[instance.name], "spot given")
        if instance.name in SPOT_PRICES:
            return NodePrice(SPOT_PRICES[instance.name], "spot")
    return NodePrice(instance.price_per_hour, "catalog")


def parse_spot_prices(values: Sequence[str]) -> dict[str, float]:
    """``--spot-price`` values (``inf2.48xlarge=5.1``) by instance type; ``BadInput`` for a
    malformed one, an instance type the catalog does not know or a price that is not positive."""
    prices: dict[str, float] = {}
    for value in values:
        name, separator, amount = value.partition("=")
        if not separator:
            raise BadInput(f"--spot-price {value!r} must be TYPE=USD, e.g. inf2.48xlarge=5.1")
        if name not in INSTANCE_TYPES:
            raise BadInput(f"--spot-price: unknown instance type {name!r}")
        try:
            price = float(amount)
        except ValueError:
            raise BadInput(f"--spot-price {value!r}: {amount!r} is not a number") from None
        if not math.isfinite(price) or price <= 0:
            raise BadInput(f"--spot-price {value!r}: the price must be a positive number")
        prices[name] = price
    return prices


def plan_warnings(
    platform: PlatformSpec, spot_prices: Mapping[str, float] | None = None
) -> tuple[str, ...]:
    """What the plan's prices cannot promise: scarce spot capacity, spot prices it lacks."""
    warnings = []
    for pool in platform.node_pools:
        instance = pool.instance
        if instance.family in CAPACITY_RESERVED_FAMILIES and not pool.capacity_reservation_ids:
            warnings.append(
                f"pool {pool.name!r} launches {instance.name} without a Capacity Reservation or "
                "Capacity Block: on-demand capacity for it is rarely there; reserve it and "
                "name it in capacity_reservation_ids (capacity_type: RESERVED, Karpenter)"
            )
        if "SPOT" not in pool.capacity_types:
            continue
        if instance.family in SCARCE_SPOT_FAMILIES:
            later = pool.capacity_types[pool.capacity_types.index("SPOT") + 1 :]
            fallback = (
                f"; it falls back to {', '.join(later)}"
                if later
                else "; add ON_DEMAND to fallback_capacity_types (Karpenter) so it can still start"
            )
            warnings.append(
                f"pool {pool.name!r} allows spot {instance.name}: spot capacity for "
                f"{' and '.join(sorted(SCARCE_SPOT_FAMILIES))} instances may be unavailable "
                "for hours in a zone, and EC2 reclaims it with two minutes' notice, a model "
                f"load's worth of lost serving{fallback}"
            )
        if pool.capacity_type == "SPOT" and node_price(pool, spot_prices).source == "catalog":
            warnings.append(
                f"pool {pool.name!r}: the catalog has no spot price for {instance.name}; it is "
                f"priced on-demand (give --spot-price {instance.name}=USD)"
            )
    pools = {t: pool for pool in platform.node_pools for t in pool.instance_types}
    for deployment in platform.deployments:
        group = deployment.multi_node
        if group is None or pools[deployment.instance_type].efa_interfaces:
            continue
        # Accepted by name (allow_without_efa): the instance type has no EFA, or its pool
        # turns EFA off.
        why = "without EFA" if not deployment.instance.efa else "whose pool turns EFA off"
        gbps = node_hardware(deployment.instance_type).network_gbps
        warnings.append(
            f"deployment {deployment.name!r} spans {group.nodes_per_replica} "
            f"{deployment.instance_type} nodes {why}: its pipeline stages hand over "
            f"activations by TCP on {gbps:g} Gbps, expect slower tokens than EFA gives"
        )
    return tuple(warnings)


@dataclass(frozen=True)
class PoolPlan:
    """A node pool's size range and what it costs per hour at either end."""

    name: str
    instance_type: str
    capacity_type: str
    min_size: int
    max_size: int
    price_per_hour: float
    fallback_capacity_types: tuple[str, ...] = ()
    price_source: PriceSource = "catalog"

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
    warnings: tuple[str, ...] = ()

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
            "warnings": list(self.warnings),
        }


def plan_deployment(
    spec: ModelDeploymentSpec,
    price: NodePrice | None = None,
    idle_hours: float = DEFAULT_IDLE_HOURS,
) -> DeploymentPlan:
    """Size a validated deployment with its own limits and scaling; nodes at ``price``
    (default: the catalog's on-demand price). A deployment that scales to zero is also
    priced idle, ``idle_hours`` a day (:mod:`eks_inference.ops.scale_to_zero`)."""
    per_node = spec.replicas_per_node
    own_cold_start = cold_start(spec)
    node_price = spec.instance.price_per_hour if price is None else price.per_hour
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
            price_per_hour=None if price is None else price.per_hour,
            price_source=None if price is None else price.source,
            adapter_bytes=spec.adapter_bytes,
            nodes_per_replica=spec.nodes_per_replica,
        ),
        nodes_min=sizing.nodes_needed(spec.scaling.min_replicas, per_node) * spec.nodes_per_replica,
        nodes_max=spec.max_nodes,
        watch=signals_of(spec).watch_list(),
        kv_tiers=kv_tiers(spec),
        adapters=adapter_slots(spec),
        cold_start=own_cold_start,
        cold_starts=cold_starts(spec),
        recommendation=recommended_loader(spec),
        scale_to_zero=scale_to_zero(spec, own_cold_start, node_price, idle_hours),
        split=split_plan(spec, node_price),
    )


def plan_platform(
    platform: PlatformSpec,
    spot_prices: Mapping[str, float] | None = None,
    idle_hours: float = DEFAULT_IDLE_HOURS,
) -> PlatformPlan:
    """Plan every deployment and price every node pool of a platform, each pool at its
    capacity type (:func:`node_price`; ``spot_prices`` override the catalog's); deployments
    that scale to zero idle ``idle_hours`` a day."""
    prices = {pool.name: node_price(pool, spot_prices) for pool in platform.node_pools}
    return PlatformPlan(
        deployments=tuple(
            plan_deployment(d, prices[platform.pool_for(d).name], idle_hours)
            for d in platform.deployments
        ),
        pools=tuple(
            PoolPlan(
                name=pool.name,
                instance_type=pool.instance.name,
                capacity_type=pool.capacity_type,
                min_size=pool.min_size,
                max_size=pool.max_size,
                price_per_hour=prices[pool.name].per_hour,
                fallback_capacity_types=pool.fallback_capacity_types,
                price_source=prices[pool.name].source,
            )
            for pool in platform.node_pools
        ),
        warnings=(
            *plan_warnings(platform, spot_prices),
            *platform.topology_policy_notes(),
            *key_in_clear_warnings(platform.routes()),
            *one_replica_notes(platform.deployments),
        ),
    )
