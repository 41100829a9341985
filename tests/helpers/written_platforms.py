"""Every platform whose manifests the tests hold to a reference: the reference platform in both
provisioning modes, the 100-deployment platform of the benchmarks, every example platform, and
the chart tests' own platforms; with the writer's context for each."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from bench.platforms import generated_platform
from eks_inference.charts.context import LustreMount, RenderContext
from eks_inference.charts.render import default_context
from eks_inference.charts.weights_loaders import loader_of
from eks_inference.specification.platform import PlatformSpec
from tests.charts.test_ingress import HOST_ROUTED
from tests.charts.test_karpenter import PLATFORMS as KARPENTER_PLATFORMS
from tests.helpers.observed import AUTOSCALED
from tests.helpers.platforms import EXAMPLES, REFERENCE_PLATFORM
from tests.helpers.rendered import variants_spec

PLATFORMS: dict[str, Callable[[], PlatformSpec]] = {
    "reference": lambda: PlatformSpec.from_yaml(REFERENCE_PLATFORM),
    "reference-karpenter": lambda: PlatformSpec.from_yaml(
        REFERENCE_PLATFORM
    ).with_node_provisioning("karpenter"),
    "generated-100": lambda: generated_platform(100),
    **{
        f"example-{path.stem}": (lambda path=path: PlatformSpec.from_yaml(path))
        for path in EXAMPLES
    },
    "variants": variants_spec,
    "variants-karpenter": lambda: variants_spec().with_node_provisioning("karpenter"),
    "host-routed": lambda: PlatformSpec.model_validate(HOST_ROUTED),
    "autoscaled": lambda: AUTOSCALED,
    "karpenter-purchasing": KARPENTER_PLATFORMS["purchasing"],
}


def writer_context(platform: PlatformSpec) -> RenderContext:
    """The writer's context, plus a file system for each FSx volume the stack would create
    (known only once deployed; the writer refuses those deployments)."""
    context = default_context(platform)
    imported = {name for name, _ in context.file_systems}
    created = tuple(
        (spec.name, LustreMount(f"fs-0{index:016x}", f"fs-{index}.fsx", "abcdef12", 1200))
        for index, spec in enumerate(platform.deployments)
        if loader_of(spec).volume_kind == "lustre" and spec.name not in imported
    )
    return dataclasses.replace(context, file_systems=(*context.file_systems, *created))
