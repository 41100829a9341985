"""The Services a deployment's objects need, and the rule that no two deployments share one.

Ingress backends, rewrite transforms and the engines' own objects refer to a deployment's
Services by name, and some of them are made by controllers rather than the charts (KubeRay's
head and Serve Services, Knative's per revision). Two deployments needing a Service of one
name would overwrite each other's, so the platform refuses the second, naming both.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from eks_inference.specification.capabilities import DerivesServiceNames
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import engine_of
from eks_inference.specification.routing_rules import routing_services
from eks_inference.specification.validation import Problems


def services(spec: ModelDeploymentSpec) -> tuple[str, ...]:
    """The Services in the inference namespace that exist because of ``spec``, as its engine
    says (standalone vLLM's chart creates ``<name>``; for a RayService KubeRay creates
    ``<name>-head-svc`` and ``<name>-serve-svc`` itself), and those of its endpoint picker and
    proxy with ``routing``. Ingress backends and their rewrite transforms
    (``transforms.<service>``) name these Services.
    """
    return (*engine_of(spec).services(spec), *routing_services(spec))


def check_names(deployments: Sequence[ModelDeploymentSpec], problems: Problems) -> None:
    """No two deployments' Services share a name, whether the charts or KubeRay create them.

    A vLLM deployment named ``x-serve-svc`` and a RayService named ``x`` would both own the
    Service ``x-serve-svc``: one would overwrite the other, and both Ingresses would send
    requests to whichever model it selects. The later deployment's ``name`` fails, naming
    the earlier one. Services a controller derives (Knative's, one per revision:
    :class:`~eks_inference.specification.capabilities.DerivesServiceNames`) count too: a
    deployment whose Service is among them fails, naming the deployment they derive from.
    """
    owners: dict[str, int] = {}
    derived = [
        (i, re.compile(family.pattern(spec)))
        for i, spec in enumerate(deployments)
        if (family := engine_of(spec).capability(DerivesServiceNames)) is not None
    ]
    for i, spec in enumerate(deployments):
        for service in services(spec):
            holder = _holder(service, i, deployments, owners, derived)
            if holder is not None:
                problems.add(
                    ("deployments", i, "name"),
                    f"deployment {spec.name!r} ({spec.engine}) needs the Service {service!r}, "
                    f"which {holder}: rename one of them",
                    spec.name,
                )
                break
            owners.setdefault(service, i)


def _holder(
    service: str,
    i: int,
    deployments: Sequence[ModelDeploymentSpec],
    owners: dict[str, int],
    derived: list[tuple[int, re.Pattern[str]]],
) -> str | None:
    """Who else has ``service`` before deployment ``i`` takes it, as the error says it."""
    earlier = owners.get(service)
    # A name used twice is reported by the platform's own rule on unique names.
    if earlier is not None and deployments[earlier].name != deployments[i].name:
        other = deployments[earlier]
        return f"deployment {other.name!r} (deployments.{earlier}.name, {other.engine}) also needs"
    for j, family in derived:
        if j != i and family.fullmatch(service):
            other = deployments[j]
            return (
                f"the controllers of deployment {other.name!r} (deployments.{j}.name, "
                f"{other.engine}) make for its revisions"
            )
    return None
