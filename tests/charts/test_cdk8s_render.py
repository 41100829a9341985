"""The manifest writer's files are the files cdk8s renders from the same charts, byte for byte.

``eks-inference manifests`` writes the chart records' objects without cdk8s (no JavaScript
runtime). Here every record of a platform is wrapped in its cdk8s chart inside one
:class:`cdk8s.App` (:func:`~eks_inference.charts.chart.cdk8s_charts`), each chart's objects
are read back as Node sees them (``Testing.synth`` calls the chart's ``toJson`` in the jsii
kernel, which reaches the chart's Python ``to_json`` and returns its JSON across the
kernel), and written with the same writer: the texts must be equal. The app must also order
the charts as the records say (``add_dependency``), which is how cdk8s would apply them.

Platforms: those of :mod:`tests.charts.platforms` (the reference platform in both provisioning
modes, the 100-deployment platform of the benchmarks, every example platform, and the chart
tests' own platforms).
"""

from __future__ import annotations

import cdk8s
import pytest

from eks_inference.charts.chart import cdk8s_charts
from eks_inference.charts.render import manifest_text, platform_charts, render_files
from tests.helpers.written_platforms import PLATFORMS, writer_context

# Each platform renders on its own (no app is shared), so the tests are spread over the workers.
pytestmark = pytest.mark.synth


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_files_equal_the_files_rendered_through_cdk8s(name: str) -> None:
    platform = PLATFORMS[name]()
    context = writer_context(platform)
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
