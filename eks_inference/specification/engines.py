"""The engine extension point as the spec layer sees it: one registry, one base class.

An engine is what serves a deployment's model (``engine: vllm``, ``engine: rayservice``). Each
is one class, written once, in one module of :mod:`eks_inference.engines`: it says which
``engine`` value it answers to and everything about a deployment that depends on it. This
module holds the part of that class the spec layer reads (the engine's own rules, the
accelerators and loaders it runs with, the Services it creates, the replicas a rollout adds),
so that a spec validates without rendering anything; the charts layer's
:class:`~eks_inference.charts.serving.ServingEngine` adds what the engine renders and
how it is observed.

:data:`ENGINES` is the one registry, and :func:`engine_of` the one place that dispatches on
``spec.engine``: no other code compares the value. The built-in engines are registered when
the package is imported; another engine is registered with ``ENGINES.register(MyEngine())``
before the specs naming it are validated (see ``docs/adding-an-engine.md``). The package root
tells the registry how to load the built-ins (:meth:`EngineRegistry.load_built_ins_with`), so
this layer imports no engine module.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, ClassVar

from pydantic import AfterValidator, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from eks_inference.catalog import Accelerator
from eks_inference.specification.validation import Problems, Rule, rule_error

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec

# An engine's name is the ``engine`` value of a spec and a Kubernetes label value.
_ENGINE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,29}$")
# Weights from the model bucket through the Mountpoint for S3 CSI driver: every engine can
# read a mounted directory, so it is what an engine supports unless it says otherwise.
MOUNTPOINT = "mountpoint"
# The OpenAI API, ``/v1`` and below: the path every engine's servers answer clients on.
OPENAI_API_PATH = "/v1"


class Engine(ABC):
    """What an engine decides about a deployment before anything is rendered.

    Subclasses set :attr:`name` and :attr:`summary`, and override what differs from the
    defaults: an engine runs on every accelerator, reads weights through Mountpoint only, has
    no rules of its own and rolls out one extra replica at a time. The charts layer's
    :class:`~eks_inference.charts.serving.ServingEngine` is the class engines extend.
    """

    #: The ``engine`` value of the specs this engine serves.
    name: ClassVar[str]
    #: What the engine runs, in a few words: ``"a standalone vLLM Deployment"``.
    summary: ClassVar[str]
    #: The accelerators it serves on.
    accelerators: ClassVar[frozenset[Accelerator]] = frozenset(
        {Accelerator.NEURON, Accelerator.NVIDIA}
    )
    #: Whether it serves prefill and decode on separate workers (``disaggregation``).
    disaggregates: ClassVar[bool] = False

    def kv_cache_offload(self, accelerator: Accelerator) -> bool:
        """Whether it offloads the KV cache with LMCache (``kv_cache``) on ``accelerator``."""
        return False

    def loaders(self, accelerator: Accelerator) -> frozenset[str]:
        """The ``weights.loader`` values it reads weights with on ``accelerator``."""
        return frozenset({MOUNTPOINT})

    def mounted_prefixes(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        """Bucket prefixes its servers mount through Mountpoint beside the weights (Triton's
        framework models' files), which the Mountpoint driver is granted."""
        return ()

    def own_fields(self) -> frozenset[str]:
        """Fields of the spec only this engine reads (``triton``): set on a spec naming
        another engine, they would be ignored, so they are refused there."""
        return frozenset()

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

    def served_model_names(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        """The model names clients send in requests (``model``): the Hugging Face id."""
        return (spec.model.id,)

    def api_paths(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        """The path prefixes the load balancer forwards to ``spec``'s servers: the OpenAI API.

        Each is one listener rule of the platform's load balancer (the deployment's route
        holds them, :attr:`~eks_inference.specification.routes.Route.api_paths`, and validation
        counts
        them against the load balancer's quota); every one must be behind the API key.
        """
        return (OPENAI_API_PATH,)

    def rollout_headroom_replicas(self, spec: ModelDeploymentSpec) -> int:
        """Replicas a rollout runs beside the current ones; the node pool must hold them."""
        return 1

    def scales_at_run_time(self, spec: ModelDeploymentSpec) -> bool:
        """Whether something changes the replica count between the scaling bounds."""
        return spec.scaling.min_replicas != spec.scaling.max_replicas

    #: Whether ``scaling.min_replicas: 0`` works: something outside the model's replicas
    #: holds the first request while a replica starts (Ray Serve's proxy, Knative's activator).
    scales_to_zero: ClassVar[bool] = False
    #: Whether the engine runs as Knative revisions and reads ``scaling.serverless``.
    runs_on_knative: ClassVar[bool] = False

    def unsupported_reason(self, accelerator: Accelerator) -> str | None:
        """Why the engine does not run on ``accelerator``, for the error refusing it."""
        return None


class EngineRegistry:
    """The engines a spec may name, by name.

    Registering a second engine under a taken name is refused, so an engine can never
    silently replace another; names follow the ``engine`` field's pattern (a Kubernetes label
    value, at most 30 characters). The package's built-in engines are registered on first use
    (:meth:`load_built_ins_with`), so that a command refusing a file before it validates any
    deployment does not pay for importing them.
    """

    def __init__(self, engines: tuple[Engine, ...] = ()) -> None:
        self._engines: dict[str, Engine] = {}
        self._load_built_ins: Callable[[], object] | None = None
        for engine in engines:
            self.register(engine)

    def load_built_ins_with(self, load: Callable[[], object]) -> None:
        """Call ``load`` (which registers the built-in engines) before the registry is first
        read."""
        self._load_built_ins = load

    def _loaded(self) -> dict[str, Engine]:
        load, self._load_built_ins = self._load_built_ins, None
        if load is not None:
            load()
        return self._engines

    def register(self, engine: Engine) -> None:
        """Add ``engine``, answering to ``engine.name``."""
        if not _ENGINE_NAME.fullmatch(engine.name):
            raise ValueError(
                f"engine name {engine.name!r} must be 1-30 lowercase letters, digits, '-' or "
                "'_', starting with a letter"
            )
        taken = self._loaded().get(engine.name)
        if taken is not None and taken is not engine:
            raise ValueError(
                f"engine {engine.name!r} is already registered ({type(taken).__qualname__}); "
                "choose another name"
            )
        self._engines[engine.name] = engine

    def names(self) -> tuple[str, ...]:
        """Every registered name, in registration order (the built-ins first)."""
        return tuple(self._loaded())

    def get(self, name: str) -> Engine | None:
        """The engine registered as ``name``, if any."""
        return self._loaded().get(name)

    def copy(self) -> EngineRegistry:
        """A registry holding the same engines, to extend without changing this one."""
        return EngineRegistry(tuple(self._loaded().values()))

    def __iter__(self) -> Iterator[Engine]:
        return iter(tuple(self._loaded().values()))


#: The one registry of engines.
ENGINES = EngineRegistry()


def engine_of(spec: ModelDeploymentSpec) -> Engine:
    """The engine serving ``spec``: the one place that dispatches on ``spec.engine``."""
    engine = ENGINES.get(spec.engine)
    if engine is None:
        raise ValueError(
            f"deployment {spec.name!r}: engine {spec.engine!r} is not registered; "
            f"registered: {', '.join(ENGINES.names())}"
        )
    return engine


def _registered(name: str) -> str:
    if ENGINES.get(name) is None:
        raise rule_error(
            f"unknown engine {name!r}; use one of {', '.join(ENGINES.names())}"
            " (or register an engine of that name)"
        )
    return name


class _RegisteredNames:
    """The JSON schema of an engine name: an enum of the engines registered when it is made."""

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"enum": list(ENGINES.names()), "type": "string"}


EngineName = Annotated[str, AfterValidator(_registered), _RegisteredNames()]
"""The name of a registered engine (see :data:`ENGINES`)."""


def engine_rules(spec: ModelDeploymentSpec) -> tuple[Rule[ModelDeploymentSpec], ...]:
    """The rules of the engine ``spec`` names, each reading ``engine`` too; none if unknown.

    ``spec`` may be a partial model whose ``engine`` failed validation and is then unset.
    """
    name = getattr(spec, "engine", None)
    engine = ENGINES.get(name) if isinstance(name, str) else None
    if engine is None:
        return ()
    return tuple(Rule(rule.reads | {"engine"}, rule.check) for rule in engine.rules())


def supported_loader_problem(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The weights loader must be one the engine reads weights with on the instance's
    accelerator; the fix names the engines and accelerators that do support it."""
    loader = spec.weights.loader
    engine = engine_of(spec)
    if loader in engine.loaders(spec.accelerator):
        return
    supporting = [
        (other.name, accelerator)
        for other in ENGINES
        for accelerator in sorted(other.accelerators)
        if loader in other.loaders(accelerator)
    ]
    where = (
        f"works only for {_engines_on(supporting)}"
        if supporting
        else "is supported by no registered engine"
    )
    usable = sorted(engine.loaders(spec.accelerator))
    problems.add(
        ("weights", "loader"),
        f"{loader} {where}; use loader: {' or '.join(usable)} here",
        loader,
    )


def _engines_on(pairs: list[tuple[str, Accelerator]]) -> str:
    """``engine: vllm on a GPU instance``, for the (engine, accelerator) pairs given."""
    by_engine: dict[str, list[Accelerator]] = {}
    for name, accelerator in pairs:
        by_engine.setdefault(name, []).append(accelerator)
    phrases = []
    for name, accelerators in by_engine.items():
        if set(accelerators) >= {Accelerator.NEURON, Accelerator.NVIDIA}:
            phrases.append(f"engine: {name}")
        else:
            on = " or ".join(_INSTANCE_KIND[a] for a in accelerators)
            phrases.append(f"engine: {name} on {on}")
    return ", ".join(phrases)


_INSTANCE_KIND: dict[Accelerator, str] = {
    Accelerator.NVIDIA: "a GPU instance",
    Accelerator.NEURON: "an Inferentia2 instance",
    Accelerator.NONE: "a CPU instance",
}


def engine_fields_problem(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """A field another engine owns (:meth:`Engine.own_fields`) is not set on this spec."""
    engine = engine_of(spec)
    for other in ENGINES:
        for field in sorted(other.own_fields() - engine.own_fields()):
            if getattr(spec, field, None) is not None:
                problems.add(
                    (field,),
                    f"{field} applies only to engine: {other.name}, not {engine.name}; remove "
                    f"it, or use engine: {other.name}",
                )


def supported_accelerator_problem(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The engine must run on the instance type's accelerator."""
    engine = engine_of(spec)
    if spec.accelerator in engine.accelerators:
        return
    kinds = " or ".join(_INSTANCE_KIND[a] for a in sorted(engine.accelerators))
    others = [e.name for e in ENGINES if spec.accelerator in e.accelerators]
    reason = engine.unsupported_reason(spec.accelerator)
    problems.add(
        ("engine",),
        f"engine {engine.name} ({engine.summary}) runs only on {kinds}, not "
        f"{spec.instance_type}{f' ({reason})' if reason else ''}; use another instance type, "
        f"or engine: {' or '.join(others)}",
        spec.engine,
    )


def scale_to_zero_problem(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """``scaling.min_replicas: 0`` only for an engine that scales to zero."""
    engine = engine_of(spec)
    if spec.scaling.min_replicas > 0 or engine.scales_to_zero:
        return
    able = [e.name for e in ENGINES if e.scales_to_zero]
    problems.add(
        ("scaling", "min_replicas"),
        f"engine {engine.name} ({engine.summary}) does not scale to zero: nothing would hold "
        "the first request while a replica starts; set min_replicas >= 1"
        + (f", or use engine: {' or '.join(able)}" if able else ""),
        spec.scaling.min_replicas,
    )


def serverless_settings_problem(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """``scaling.serverless`` only for an engine that runs as Knative revisions.

    A setting equal to its default is not refused, so that a spec copied through
    ``model_dump()`` (which writes every default out) stays valid.
    """
    engine = engine_of(spec)
    serverless = spec.scaling.serverless
    defaults = type(serverless)()
    given = sorted(
        name
        for name in serverless.model_fields_set
        if getattr(serverless, name) != getattr(defaults, name)
    )
    if engine.runs_on_knative or not given:
        return
    knative = [e.name for e in ENGINES if e.runs_on_knative]
    problems.add(
        ("scaling", "serverless"),
        f"engine {engine.name} ({engine.summary}) does not run on Knative, so "
        f"scaling.serverless ({', '.join(given)}) would do nothing; remove it"
        + (f", or use engine: {' or '.join(knative)}" if knative else ""),
    )
