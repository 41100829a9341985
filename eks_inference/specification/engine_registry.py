"""The one registry of engines, and the spec fields it validates: ``engine`` and ``options``.

A spec names its engine (:data:`EngineName`: a registered name) and gives the engine's own
options (:data:`EngineOptions`: validated as the options model of the engine it names). Both
only need what every registered engine says of itself (:class:`RegisteredEngine`), so this
module, below the deployment spec, knows nothing of the engine interface that reads the spec
(:class:`~eks_inference.specification.engines.Engine`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Protocol

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

from eks_inference.specification.validation import (
    prior_fields,
    required_fields,
    rule_error,
    validate_explained,
)

# An engine's name is the ``engine`` value of a spec and a Kubernetes label value.
_ENGINE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,29}$")


class RegisteredEngine(Protocol):
    """What the registry and the spec's own fields read of an engine."""

    @property
    def name(self) -> str:
        """The ``engine`` value of the specs it serves."""

    @property
    def options(self) -> type[BaseModel] | None:
        """The model of its own options, if it has any."""

    def rollout_headroom_replicas(self, spec: Any) -> int:
        """Replicas a rollout of ``spec`` runs beside the current ones."""


class EngineRegistry:
    """The engines a spec may name, by name.

    Registering a second engine under a taken name is refused, so an engine can never
    silently replace another; names follow the ``engine`` field's pattern (a Kubernetes label
    value, at most 30 characters). The package's built-in engines are registered on first use
    (:meth:`load_built_ins_with`), so that a command refusing a file before it validates any
    deployment does not pay for importing them.
    """

    def __init__(self, engines: tuple[RegisteredEngine, ...] = ()) -> None:
        self._engines: dict[str, RegisteredEngine] = {}
        self._load_built_ins: Callable[[], object] | None = None
        for engine in engines:
            self.register(engine)

    def load_built_ins_with(self, load: Callable[[], object]) -> None:
        """Call ``load`` (which registers the built-in engines) before the registry is first
        read."""
        self._load_built_ins = load

    def _loaded(self) -> dict[str, RegisteredEngine]:
        load, self._load_built_ins = self._load_built_ins, None
        if load is not None:
            load()
        return self._engines

    def register(self, engine: RegisteredEngine) -> None:
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

    def get(self, name: str) -> RegisteredEngine | None:
        """The engine registered as ``name``, if any."""
        return self._loaded().get(name)

    def copy(self) -> EngineRegistry:
        """A registry holding the same engines, to extend without changing this one."""
        return EngineRegistry(tuple(self._loaded().values()))

    def __iter__(self) -> Iterator[RegisteredEngine]:
        return iter(tuple(self._loaded().values()))

    def named(self, name: str) -> RegisteredEngine:
        """The engine registered as ``name``; a ``ValueError`` naming the registered ones if
        none is (a validated spec always names one)."""
        engine = self.get(name)
        if engine is None:
            raise ValueError(
                f"engine {name!r} is not registered; registered: {', '.join(self.names())}"
            )
        return engine


#: The one registry of engines.
ENGINES = EngineRegistry()


def not_implementing(engine: RegisteredEngine, interface: type) -> TypeError:
    """The error for a registered ``engine`` that lacks a part of the engine interface a layer
    reads it through (the spec's ``Engine``, observation's ``ObservedEngine``, the charts'
    ``ServingEngine``): every registered engine must implement all three."""
    return TypeError(
        f"engine {engine.name!r} is registered as a {type(engine).__qualname__}, which is no "
        f"{interface.__name__}; engines extend eks_inference.charts.serving.ServingEngine"
    )


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
