"""The engine extension point as the spec layer sees it: the core interface.

An engine is what serves a deployment's model (``engine: vllm``, ``engine: rayservice``). Each
is one package of :mod:`eks_inference.engines`, whose engine class says which ``engine`` value
it answers to and everything about a deployment that depends on it. This module holds the part
of that class the spec layer reads, kept small:

- what it is: :attr:`Engine.name`, :attr:`Engine.summary`, the accelerators it runs on and why
  not on the others, the weights loaders it reads with;
- its own options (:attr:`Engine.options`, a pydantic model validated as the spec's ``options``
  and offered in ``eks-inference schema``) and its own rules (:meth:`Engine.rules`);
- the Services it creates and the replicas a rollout adds (for the platform's checks);
- what only some engines do, as capability objects (:attr:`Engine.capabilities`, the types in
  :mod:`eks_inference.specification.capabilities`), asked for by type with
  :meth:`Engine.capability`.

The charts layer's :class:`~eks_inference.charts.serving.ServingEngine` adds what the engine
renders, and :class:`~eks_inference.observability.observed.ObservedEngine` how it is observed.

:data:`~eks_inference.specification.engine_registry.ENGINES` is the one registry, and
:func:`engine_of` the one place that dispatches on ``spec.engine``: no other code compares the
value. The built-in engines are registered on the registry's first use; another engine is
registered with ``ENGINES.register(MyEngine())`` before the specs naming it are validated (see
``docs/adding-an-engine.md``). The package root tells the registry how to load the built-ins
(:meth:`~eks_inference.specification.engine_registry.EngineRegistry.load_built_ins_with`), so
this layer imports no engine package.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, TypeVar

from pydantic import BaseModel

from eks_inference.catalog import Accelerator
from eks_inference.specification import engine_registry
from eks_inference.specification.capabilities import Capability, DisaggregatesPrefill
from eks_inference.specification.validation import Rule

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec

# Weights from the model bucket through the Mountpoint for S3 CSI driver: every engine can
# read a mounted directory, so it is what an engine supports unless it says otherwise.
MOUNTPOINT = "mountpoint"
# The OpenAI API, ``/v1`` and below: the path every engine's servers answer clients on.
OPENAI_API_PATH = "/v1"

CapabilityT = TypeVar("CapabilityT", bound=Capability)
OptionsT = TypeVar("OptionsT", bound=BaseModel)


class Engine(ABC):
    """What an engine decides about a deployment before anything is rendered.

    Subclasses set :attr:`name` and :attr:`summary`, implement :meth:`services`, and override
    what differs from the defaults: an engine runs on every accelerator, reads weights through
    Mountpoint only, has no options, rules or capabilities of its own and rolls out one extra
    replica at a time. The charts layer's :class:`~eks_inference.charts.serving.ServingEngine`
    is the class engines extend.
    """

    #: The ``engine`` value of the specs this engine serves.
    name: ClassVar[str]
    #: What the engine runs, in a few words: ``"a standalone vLLM Deployment"``.
    summary: ClassVar[str]
    #: The accelerators it serves on.
    accelerators: ClassVar[frozenset[Accelerator]] = frozenset(
        {Accelerator.NEURON, Accelerator.NVIDIA}
    )
    #: Why it does not serve on an accelerator it lacks, for the error refusing it.
    not_served_on: ClassVar[Mapping[Accelerator, str]] = {}
    #: What only some engines do, each an object of a
    #: :mod:`~eks_inference.specification.capabilities` type.
    capabilities: ClassVar[tuple[Capability, ...]] = ()
    #: The model of its own options, the spec's ``options`` (``None``: it has none). Every
    #: field needs a default unless the engine cannot serve without it.
    options: ClassVar[type[BaseModel] | None] = None

    def loaders(self, accelerator: Accelerator) -> frozenset[str]:
        """The ``weights.loader`` values it reads weights with on ``accelerator``."""
        return frozenset({MOUNTPOINT})

    def rules(self) -> tuple[Rule[ModelDeploymentSpec], ...]:
        """Its own rules across the spec's fields, each with the fields it reads.

        They run only on specs naming this engine, after the rules every spec follows, and
        only when every field they read validated (``engine`` is added to each rule's reads).
        """
        return ()

    @abstractmethod
    def services(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        """The Services in the inference namespace that exist because of ``spec``.

        Two deployments whose Services share a name are refused, whoever creates the Services
        (the charts, or an operator such as KubeRay).
        """

    def rollout_headroom_replicas(self, spec: ModelDeploymentSpec) -> int:
        """Replicas a rollout runs beside the current ones; the node pool must hold them."""
        return 1

    def scales_at_run_time(self, spec: ModelDeploymentSpec) -> bool:
        """Whether something changes the replica count between the scaling bounds."""
        return spec.scaling.min_replicas != spec.scaling.max_replicas

    def capability(self, kind: type[CapabilityT]) -> CapabilityT | None:
        """The capability of type ``kind`` this engine provides, if it provides one."""
        for capability in self.capabilities:
            if isinstance(capability, kind):
                return capability
        return None

    def serves(self, kind: type[Capability], spec: ModelDeploymentSpec) -> bool:
        """Whether this engine has capability ``kind`` and does it for ``spec``."""
        capability = self.capability(kind)
        return capability is not None and capability.serves(spec)


def engine_of(spec: ModelDeploymentSpec) -> Engine:
    """The engine serving ``spec``: the one place that dispatches on ``spec.engine``."""
    return _as_engine(engine_registry.ENGINES.named(spec.engine))


def kv_cache_nodes(spec: ModelDeploymentSpec) -> int:
    """The nodes ``spec``'s engine needs at least for its prefill and decode workers (one when
    it serves aggregated: :class:`~eks_inference.specification.capabilities.
    DisaggregatesPrefill`): the one place that asks, for the rules that want EFA on the pool
    of a split whose KV cache crosses nodes, and the pods that take it."""
    split = engine_of(spec).capability(DisaggregatesPrefill)
    return 1 if split is None else split.nodes(spec)


def kv_cache_crosses_nodes(spec: ModelDeploymentSpec) -> bool:
    """Whether ``spec``'s KV cache goes from node to node (:func:`kv_cache_nodes`)."""
    return kv_cache_nodes(spec) > 1


def registered_engines() -> tuple[Engine, ...]:
    """Every registered engine, in registration order (the built-ins first)."""
    return tuple(_as_engine(engine) for engine in engine_registry.ENGINES)


def _as_engine(engine: engine_registry.RegisteredEngine) -> Engine:
    if not isinstance(engine, Engine):
        raise engine_registry.not_implementing(engine, Engine)
    return engine


def engine_options(spec: ModelDeploymentSpec, model: type[OptionsT]) -> OptionsT:
    """``spec.options``, as the options model of the engine that reads them.

    For an engine's own code: its options are validated as ``model`` whenever a spec names it,
    so anything else is a spec of another engine handed to the wrong code.
    """
    options = spec.options
    if not isinstance(options, model):
        raise TypeError(
            f"deployment {spec.name!r} (engine {spec.engine}) has no {model.__name__} options"
        )
    return options
