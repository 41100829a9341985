"""What only some engines do, as capabilities an engine provides, and the fields that need them.

Every engine answers the small core interface
(:class:`~eks_inference.specification.engines.Engine`). What only some engines do is not a
flag or a method every engine carries: it is a capability object the engine lists in its
:attr:`~eks_inference.specification.engines.Engine.capabilities`, with its own small interface,
and whoever needs it asks the engine for it by type
(:meth:`~eks_inference.specification.engines.Engine.capability`). That is the shape of
Kubernetes' admission plugins: one interface, and separate interfaces an implementation may also
satisfy.

A spec field that only an engine with a capability can honour is declared once, in
:data:`FIELD_NEEDS`; :func:`~eks_inference.specification.engine_rules.field_need_problem` is the
one rule that refuses such a field on an engine without the capability, naming the field and the
engines that have it. A new capability is one class here (or in an engine's own package) and,
if a field asks for it, one row of :data:`FIELD_NEEDS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eks_inference.catalog import Accelerator

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec
    from eks_inference.specification.kv_serving import Disaggregation


class Capability:
    """Something an engine does that not every engine does.

    :meth:`serves` says whether the engine can do it for one spec (a capability may depend on
    the accelerator); by default it always can.
    """

    def serves(self, spec: ModelDeploymentSpec) -> bool:
        """Whether the engine does this for ``spec``."""
        return True


@dataclass(frozen=True)
class ScalesToZero(Capability):
    """``scaling.min_replicas: 0`` works: something outside the model's replicas (Ray Serve's
    proxy, Knative's activator) holds the first request while a replica starts.

    ``delay_seconds`` is how long after the last request the last replica's pod is gone,
    freeing its node: an idle stretch shorter than this saves nothing.
    """

    delay_seconds: Callable[[ModelDeploymentSpec], int]


@dataclass(frozen=True)
class OffloadsKvCache(Capability):
    """The engine offloads the KV cache beyond GPU memory with LMCache (``kv_cache``), on the
    accelerators given (LMCache is built for CUDA)."""

    accelerators: frozenset[Accelerator]

    def serves(self, spec: ModelDeploymentSpec) -> bool:
        return spec.accelerator in self.accelerators


def _given_split(spec: ModelDeploymentSpec) -> Disaggregation | None:
    return spec.disaggregation


def _no_transport(spec: ModelDeploymentSpec) -> str | None:
    return None


def _one_node(spec: ModelDeploymentSpec) -> int:
    return 1


@dataclass(frozen=True)
class DisaggregatesPrefill(Capability):
    """The engine serves prefill and decode on separate workers (``disaggregation``).

    ``split`` is a spec's split as the engine serves it (default: the ``disaggregation``
    field; ``None``: aggregated), ``transport`` how the KV cache goes from prefill to decode,
    in a few words (default: not said); ``plan`` prints both. ``nodes`` is how many nodes
    the split's workers need at least, at their largest (default: one); beyond one the KV
    cache goes from node to node, which needs the node pool to attach EFA
    (:func:`~eks_inference.specification.engines.kv_cache_nodes`).
    """

    split: Callable[[ModelDeploymentSpec], Disaggregation | None] = _given_split
    transport: Callable[[ModelDeploymentSpec], str | None] = _no_transport
    nodes: Callable[[ModelDeploymentSpec], int] = _one_node


@dataclass(frozen=True)
class AutoscalesOnQueue(Capability):
    """``scaling.autoscale: true`` works: a KEDA ScaledObject scales the engine's servers on
    their queue depth and KV-cache use, read from the cluster's Prometheus."""


@dataclass(frozen=True)
class ServesModelRepository(Capability):
    """The engine serves a repository of models beside the spec's own model.

    ``served_model_names`` are the names clients send (``model``), ``mounted_prefixes`` the
    bucket prefixes its servers mount through Mountpoint beside the weights (the Mountpoint
    driver is granted them).
    """

    served_model_names: Callable[[ModelDeploymentSpec], tuple[str, ...]]
    mounted_prefixes: Callable[[ModelDeploymentSpec], tuple[str, ...]]


@dataclass(frozen=True)
class ServesExtraApiPaths(Capability):
    """The engine's servers answer clients on path prefixes beyond the OpenAI API (``/v1``).

    ``paths`` are those prefixes for a spec; each is one more listener rule of the platform's
    load balancer (validation counts them against its quota), behind the API key like ``/v1``.
    """

    paths: Callable[[ModelDeploymentSpec], tuple[str, ...]]


@dataclass(frozen=True)
class DerivesServiceNames(Capability):
    """A controller behind the engine makes Services of its own, named after the engine's
    objects in a family no list can hold (Knative: one Service per revision,
    ``<name>-predictor-00001`` and ``-private``). ``pattern`` is a regular expression that every
    such name of a spec matches in full; another deployment's Service matching it is refused."""

    pattern: Callable[[ModelDeploymentSpec], str]


@dataclass(frozen=True)
class ReadsVolumesAs(Capability):
    """The engine's pods run as a fixed non-root user, so the Mountpoint volumes they read are
    mounted as that user and group (``uid``, ``gid``) instead of root."""

    uid: int
    gid: int


@dataclass(frozen=True)
class ServesAdapters(Capability):
    """The engine serves LoRA adapters of the base model beside it (``adapters``), on the
    accelerators given, by name through the OpenAI API.

    ``target_modules`` are the module names (as PEFT writes them in an adapter's
    ``adapter_config.json``) that the engine applies adapters to for a spec's model; preflight
    refuses an adapter that targets another. ``runtime_paths`` are the server paths under the
    OpenAI API that load or unload adapters at run time, registered for a spec that finds
    adapters on demand: the platform's load balancer answers them with a 404 itself.
    ``on_demand_base_model`` is the base model an adapter found on demand must name in its
    config for a spec (what the engine compares it with), or ``None`` when the engine cannot
    find adapters on demand for that spec.
    """

    accelerators: frozenset[Accelerator]
    target_modules: Callable[[ModelDeploymentSpec], frozenset[str]]
    runtime_paths: Callable[[ModelDeploymentSpec], tuple[str, ...]]
    on_demand_base_model: Callable[[ModelDeploymentSpec], str | None]

    def serves(self, spec: ModelDeploymentSpec) -> bool:
        return spec.accelerator in self.accelerators


@dataclass(frozen=True)
class PicksEndpoints(Capability):
    """The engine's servers can stand behind the Inference Extension's endpoint picker
    (``routing``): each replica is one pod serving the OpenAI API on its own port, selected
    by an InferencePool, and exposes the metrics the picker's scorers read
    (``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``), on the accelerators given."""

    accelerators: frozenset[Accelerator]

    def serves(self, spec: ModelDeploymentSpec) -> bool:
        return spec.accelerator in self.accelerators


@dataclass(frozen=True)
class ServesAcrossNodes(Capability):
    """One replica runs across several nodes (``multi_node``), on the accelerators given: a
    group of one pod per node that starts, fails and rolls out as one, with only its leader
    behind the Service."""

    accelerators: frozenset[Accelerator]

    def serves(self, spec: ModelDeploymentSpec) -> bool:
        return spec.accelerator in self.accelerators


@dataclass(frozen=True)
class FieldNeed:
    """A spec field that only an engine with ``capability`` can honour.

    ``asks`` says whether the spec asks for the capability through the field; ``does`` says
    what the capability does, as the error puts it ("does not <does>"); ``otherwise`` is the fix
    that keeps the engine (remove the field, or set it so that it asks for nothing).
    """

    field: tuple[str, ...]
    capability: type[Capability]
    asks: Callable[[ModelDeploymentSpec], bool]
    does: str
    otherwise: str

    @property
    def reads(self) -> frozenset[str]:
        """The fields the rule of this need reads: the field, the engine, and the instance type
        (a capability may depend on the accelerator)."""
        return frozenset({".".join(self.field), "engine", "instance_type"})


#: Every field that needs a capability, with what would work without it.
FIELD_NEEDS: tuple[FieldNeed, ...] = (
    FieldNeed(
        ("scaling", "min_replicas"),
        ScalesToZero,
        lambda spec: spec.scaling.min_replicas == 0,
        "scale to zero: nothing would hold the first request while a replica starts",
        "set min_replicas >= 1",
    ),
    FieldNeed(
        ("scaling", "autoscale"),
        AutoscalesOnQueue,
        lambda spec: spec.scaling.autoscale,
        "scale its servers with KEDA on their queue depth",
        "remove autoscale (the engine scales between min_replicas and max_replicas itself)",
    ),
    FieldNeed(
        ("kv_cache",),
        OffloadsKvCache,
        lambda spec: spec.kv_cache is not None,
        "offload the KV cache with LMCache",
        "remove kv_cache",
    ),
    FieldNeed(
        ("disaggregation",),
        DisaggregatesPrefill,
        lambda spec: spec.disaggregation is not None,
        "serve prefill and decode on separate workers",
        "remove disaggregation",
    ),
    FieldNeed(
        ("adapters",),
        ServesAdapters,
        lambda spec: spec.adapters is not None,
        "serve LoRA adapters",
        "remove adapters (serve each fine-tune as a deployment of its own)",
    ),
    FieldNeed(
        ("routing", "picker"),
        PicksEndpoints,
        lambda spec: spec.routing is not None and spec.routing.picks,
        "stand behind the endpoint picker",
        "set picker: round_robin (or remove routing)",
    ),
    FieldNeed(
        ("multi_node",),
        ServesAcrossNodes,
        lambda spec: spec.multi_node is not None,
        "serve one replica across several nodes",
        "remove multi_node and choose an instance type that holds the model",
    ),
)
