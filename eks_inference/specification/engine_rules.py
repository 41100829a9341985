"""The rules every spec follows about its engine, and the engine's own rules.

Every spec's engine must run on its instance type's accelerator
(:func:`supported_accelerator_problem`) and read weights with its loader
(:func:`supported_loader_problem`); a field that needs a capability the engine lacks is refused
by one rule per field of :data:`~eks_inference.specification.capabilities.FIELD_NEEDS`
(:func:`field_need_problem`). :func:`engine_rules` adds the rules of the engine a spec names.
Each fix names the engines that would accept the spec.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from eks_inference.catalog import Accelerator
from eks_inference.specification.capabilities import FIELD_NEEDS, FieldNeed
from eks_inference.specification.engines import engine_of, registered_engines
from eks_inference.specification.validation import Problems, Rule

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec

# The value of a field that a message may echo: one a user typed, not a nested model.
_ECHOED_TYPES = (bool, int, float, str)


def engine_rules(spec: ModelDeploymentSpec) -> tuple[Rule[ModelDeploymentSpec], ...]:
    """The rules of the engine ``spec`` names, each reading ``engine`` too; none if unknown.

    ``spec`` may be a partial model whose ``engine`` failed validation and is then unset.
    """
    name = getattr(spec, "engine", None)
    engine = next((e for e in registered_engines() if e.name == name), None)
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
        for other in registered_engines()
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


def supported_accelerator_problem(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """The engine must run on the instance type's accelerator."""
    engine = engine_of(spec)
    if spec.accelerator in engine.accelerators:
        return
    kinds = " or ".join(_INSTANCE_KIND[a] for a in sorted(engine.accelerators))
    others = [e.name for e in registered_engines() if spec.accelerator in e.accelerators]
    reason = engine.not_served_on.get(spec.accelerator)
    problems.add(
        ("engine",),
        f"engine {engine.name} ({engine.summary}) runs only on {kinds}, not "
        f"{spec.instance_type}{f' ({reason})' if reason else ''}; use another instance type, "
        f"or engine: {' or '.join(others)}",
        spec.engine,
    )


def field_need_problem(need: FieldNeed, spec: ModelDeploymentSpec, problems: Problems) -> None:
    """``need.field``, set so that it asks for ``need.capability``, only on an engine that has
    it for this spec; the fix keeps the engine without the field, or names the engines that
    have the capability."""
    if not need.asks(spec):
        return
    engine = engine_of(spec)
    if engine.serves(need.capability, spec):
        return
    able = [other.name for other in registered_engines() if other.serves(need.capability, spec)]
    on = "" if engine.capability(need.capability) is None else f" on {spec.instance_type}"
    fix = need.otherwise + (f", or use engine: {' or '.join(able)}" if able else "")
    value = functools.reduce(getattr, need.field, spec)
    problems.add(
        need.field,
        f"engine {engine.name} ({engine.summary}) does not {need.does}{on}; {fix}",
        value if isinstance(value, _ECHOED_TYPES) else None,
    )


#: One rule per field that needs a capability, each reading only its own field.
FIELD_NEED_RULES: tuple[Rule[ModelDeploymentSpec], ...] = tuple(
    Rule(need.reads, functools.partial(field_need_problem, need)) for need in FIELD_NEEDS
)


def fixed_unless_autoscaled(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """For an engine whose servers run a fixed count unless KEDA scales them on their queue
    (:class:`~eks_inference.specification.capabilities.AutoscalesOnQueue`): a replica range
    needs ``autoscale: true``, and ``autoscale: true`` needs a range. A rule such an engine
    lists among its own, reading ``scaling``."""
    scaling = spec.scaling
    summary = engine_of(spec).summary
    if not scaling.autoscale and scaling.min_replicas != scaling.max_replicas:
        self_scaling = [e.name for e in registered_engines() if e.scales_at_run_time(spec)]
        problems.add(
            ("scaling", "max_replicas"),
            f"{summary} without autoscaling runs a fixed number of replicas; set max_replicas "
            f"= min_replicas ({scaling.min_replicas}), autoscale: true to scale on queue "
            "depth with KEDA"
            + (f", or engine: {' or '.join(self_scaling)}" if self_scaling else ""),
            scaling.max_replicas,
        )
    if scaling.autoscale and scaling.min_replicas == scaling.max_replicas:
        problems.add(
            ("scaling", "max_replicas"),
            f"autoscale: true needs a range to scale in; set max_replicas above min_replicas "
            f"({scaling.min_replicas}), or autoscale: false for a fixed size",
            scaling.max_replicas,
        )
