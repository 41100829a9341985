"""The rules of ``routing`` across a deployment's fields, and the Services it adds.

The field is typed in :mod:`eks_inference.specification.routing`; whether the engine can stand
behind a picker at all is the capability rule's
(:class:`~eks_inference.specification.capabilities.PicksEndpoints`).
"""

from __future__ import annotations

from collections.abc import Sequence

from eks_inference import names
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.validation import Problems


def picks_endpoints(spec: ModelDeploymentSpec) -> bool:
    """Whether ``spec``'s requests go through the endpoint picker."""
    return spec.routing is not None and spec.routing.picks


def check_replicas_to_pick_from(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """A picker needs at least two replicas to choose between, at ``max_replicas``.

    Refused rather than warned: with one replica every request goes to it whatever the
    picker scores, so the picker and its proxy would only add a hop and two more
    Deployments. A range starting at one replica (``min_replicas: 1`` with autoscaling) is
    accepted, and ``plan`` notes that the picker helps only once a second replica runs.
    """
    routing = spec.routing
    if routing is None or not routing.picks or spec.scaling.max_replicas >= 2:
        return
    problems.add(
        ("routing", "picker"),
        f"picker: {routing.picker} chooses between replicas, and scaling.max_replicas is 1; "
        "set scaling.max_replicas (and min_replicas) to 2 or more, or picker: round_robin",
        routing.picker,
    )


def routing_services(spec: ModelDeploymentSpec) -> tuple[str, ...]:
    """The Services ``routing`` adds to a deployment: its picker's and its proxy's."""
    if not picks_endpoints(spec):
        return ()
    return (names.picker_service_name(spec.name), names.proxy_service_name(spec.name))


def one_replica_notes(deployments: Sequence[ModelDeploymentSpec]) -> tuple[str, ...]:
    """What ``plan`` notes of a picker that may run with one replica (``min_replicas: 1``
    with room to grow): until a second replica runs, the picker cannot help."""
    return tuple(
        f"deployment {spec.name!r}: picker: {spec.routing.picker} chooses between replicas, "
        f"and it runs {spec.scaling.min_replicas} while idle; with one replica every request "
        "goes to it and the picker only adds a hop (it helps once a second replica runs)"
        for spec in deployments
        if spec.routing is not None and spec.routing.picks and spec.scaling.min_replicas < 2
    )
