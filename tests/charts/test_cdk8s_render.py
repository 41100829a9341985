"""The manifest writer's files are the files cdk8s renders from the same charts, byte for byte.

``eks-inference manifests`` writes the chart records' objects without cdk8s (no JavaScript
runtime). Here every record of a platform is wrapped in its cdk8s chart inside one
:class:`cdk8s.App` (:func:`~eks_inference.charts.chart.cdk8s_charts`), each chart's objects
are read back as Node sees them (``Testing.synth`` calls the chart's ``toJson`` in the jsii
kernel, which reaches the chart's Python ``to_json`` and returns its JSON across the
kernel), and written with the same writer: the texts must be equal. The app must also order
the charts as the records say (``add_dependency``), which is how cdk8s would apply them.

Platforms: the reference platform in both provisioning modes, the 100-deployment platform of
the benchmarks, every example platform, and the chart tests' own platforms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import cdk8s
import pytest

from bench.platforms import generated_platform
from eks_inference.charts.chart import cdk8s_charts
from eks_inference.charts.common import LustreMount, RenderContext
from eks_inference.charts.loading import loader_of
from eks_inference.charts.render import (
    default_context,
    manifest_text,
    platform_charts,
    render_files,
)
from eks_inference.spec.platform import PlatformSpec
from tests.charts.conftest import (
    CONTEXT,
    EXAMPLE_PLATFORMS,
    REFERENCE_PLATFORM,
    VARIANT_DEPLOYMENTS,
    VARIANT_POOLS,
)
from tests.charts.observed import AUTOSCALED
from tests.charts.test_endpoint import HOST_ROUTED
from tests.charts.test_karpenter import PLATFORMS as KARPENTER_PLATFORMS

# Each platform renders on its own (no app is shared), so the tests are spread over the workers.
pytestmark = pytest.mark.synth


def _variants() -> PlatformSpec:
    return PlatformSpec.model_validate(
        {
            "model_bucket_name": CONTEXT.bucket_name,
            "node_pools": VARIANT_POOLS,
            "deployments": VARIANT_DEPLOYMENTS,
        }
    )


PLATFORMS: dict[str, Callable[[], PlatformSpec]] = {
    "reference": lambda: PlatformSpec.from_yaml(REFERENCE_PLATFORM),
    "reference-karpenter": lambda: PlatformSpec.from_yaml(
        REFERENCE_PLATFORM
    ).with_node_provisioning("karpenter"),
    "generated-100": lambda: generated_platform(100),
    **{
        f"example-{path.stem}": (lambda path=path: PlatformSpec.from_yaml(path))
        for path in EXAMPLE_PLATFORMS
    },
    "variants": _variants,
    "variants-karpenter": lambda: _variants().with_node_provisioning("karpenter"),
    "host-routed": lambda: PlatformSpec.model_validate(HOST_ROUTED),
    "autoscaled": lambda: AUTOSCALED,
    "karpenter-purchasing": KARPENTER_PLATFORMS["purchasing"],
}


def _context(platform: PlatformSpec) -> RenderContext:
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


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_files_equal_the_files_rendered_through_cdk8s(name: str) -> None:
    platform = PLATFORMS[name]()
    context = _context(platform)
    records = platform_charts(platform, context)
    app = cdk8s.App()
    charts = cdk8s_charts(app, records.values())
    through_node = {
        path: manifest_text(cdk8s.Testing.synth(chart))
        for path, chart in zip(records, charts, strict=True)
    }
    files = render_files(platform, context)
    assert list(files) == list(through_node)
    for path, text in files.items():
        assert text == through_node[path], path
    # cdk8s orders the app's charts by the records' dependencies: each after those it follows.
    order = {chart.node.id: index for index, chart in enumerate(app.charts)}
    assert len(order) == len(records)
    for chart in charts:
        after = chart.record.after
        assert {d.node.id for d in chart.node.dependencies} == set(after), chart.node.id
        assert all(order[other] < order[chart.node.id] for other in after), chart.node.id
