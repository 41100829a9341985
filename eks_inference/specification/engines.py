"""The engine extension point as the spec layer sees it: the core interface and the one registry.

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

:data:`ENGINES` is the one registry, and :func:`engine_of` the one place that dispatches on
``spec.engine``: no other code compares the value. The built-in engines are registered on the
registry's first use; another engine is registered with ``ENGINES.register(MyEngine())`` before
the specs naming it are validated (see ``docs/adding-an-engine.md``). The package root tells the
registry how to load the built-ins (:meth:`EngineRegistry.load_built_ins_with`), so this layer
imports no engine package.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    GetJsonSchemaHandler,
    SerializeAsAny,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from eks_inference.catalog import Accelerator
from eks_inference.specification.capabilities import Capability
from eks_inference.specification.validation import (
    Rule,
    prior_fields,
    required_fields,
    rule_error,
    validate_explained,
)

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec

# An engine's name is the ``engine`` value of a spec and a Kubernetes label value.
_ENGINE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,29}$")
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


def _validated_options(
    value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
) -> BaseModel | None:
    """The ``options`` of a spec, validated as the options model of the engine it names.

    Absent options are the model's defaults (an error naming each required option, for an
    engine that cannot serve without them). With no valid engine beside them (the ``engine``
    field failed), there is nothing to validate given options as: they are refused, which also
    keeps rules from reading them.
    """
    name = prior_fields(info).get("engine")
    engine = ENGINES.get(name) if isinstance(name, str) else None
    if engine is None:
        if value is None:
            return None
        raise rule_error("options are checked against the engine, once engine is valid")
    model = engine.options
    if model is None:
        if value is None:
            return None
        offering = [e.name for e in ENGINES if e.options is not None]
        raise rule_error(
            f"engine {engine.name} has no options; remove options"
            + (f" (engines with options: {', '.join(offering)})" if offering else "")
        )
    if isinstance(value, model):
        return value
    required = required_fields(model)
    if value is None and required:
        raise rule_error(
            f"engine {engine.name} needs its options: add options with {', '.join(required)}"
        )
    return validate_explained(model, {} if value is None else value)


class _OptionsOfEachEngine:
    """The JSON schema of ``options``: the options model of each registered engine, each
    marked with the engine it belongs to (``x-engine``), for the spec's conditional schema."""

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        choices: list[JsonSchemaValue] = [
            {**handler(engine.options.__pydantic_core_schema__), "x-engine": engine.name}
            for engine in ENGINES
            if engine.options is not None
        ]
        return {
            "anyOf": [*choices, {"type": "null"}],
            "default": None,
            "description": "The engine's own options: the model of the engine that engine "
            "names (each choice's x-engine); engines without options take none.",
        }


EngineOptions = Annotated[
    SerializeAsAny[BaseModel] | None, WrapValidator(_validated_options), _OptionsOfEachEngine()
]
"""A spec's ``options``: an instance of the options model of the engine it names."""


def options_by_engine(schema: dict[str, Any]) -> None:
    """Add to a spec's JSON schema one ``if engine is X then options is X's model`` per engine,
    from the choices of its ``options`` property (for editors that check a file as it is
    written)."""
    choices = schema.get("properties", {}).get("options", {}).get("anyOf", [])
    conditions = [
        {
            "if": {"properties": {"engine": {"const": choice["x-engine"]}}},
            "then": {
                "properties": {
                    "options": {key: value for key, value in choice.items() if key != "x-engine"}
                }
            },
        }
        for choice in choices
        if "x-engine" in choice
    ]
    if conditions:
        schema["allOf"] = conditions
