"""The cdk8s chart a :class:`~eks_inference.charts.record.ChartRecord` becomes in a cdk8s app.

The only module of the charts layer that imports cdk8s. The charts themselves are plain
records (:mod:`eks_inference.charts.record`), so an engine or a loader can be read, tested and
rendered to YAML without a cdk8s app and ``eks-inference manifests`` never starts a
JavaScript runtime; a record is wrapped here only where an app needs a cdk8s chart, such as
``cluster.add_cdk8s_chart``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import cdk8s
from constructs import Construct

from eks_inference.charts.record import ChartRecord


class ObjectsChart(cdk8s.Chart):
    """A cdk8s chart of one :class:`~eks_inference.charts.record.ChartRecord`.

    :meth:`to_json` returns the record's objects, so a chart costs one call into cdk8s
    (creating the chart) rather than two or more per object. It is still a cdk8s chart: it
    lives in a :class:`cdk8s.App`, can be ordered after other charts (``add_dependency``) and
    can be given to ``cluster.add_cdk8s_chart``, whose call to ``toJson`` reaches
    :meth:`to_json`. The record's ``chart_id`` is the chart's id.
    """

    def __init__(self, scope: Construct, record: ChartRecord) -> None:
        super().__init__(scope, record.chart_id, disable_resource_name_hashes=True)
        self.record = record

    def to_json(self) -> list[Any]:
        """The record's objects, as a deep copy: callers may change what they get."""
        return self.record.to_json()


def cdk8s_charts(app: cdk8s.App, records: Iterable[ChartRecord]) -> list[ObjectsChart]:
    """``records`` as charts of ``app``, each depending on the charts it is applied after.

    A record may only come after records given before it, so ``records`` in apply order
    (as :func:`~eks_inference.charts.deployment.deployment_charts` and the manifest writer
    list them) is always accepted.
    """
    charts: dict[str, ObjectsChart] = {}
    for record in records:
        chart = ObjectsChart(app, record)
        if record.after:
            chart.add_dependency(*(charts[chart_id] for chart_id in record.after))
        charts[record.chart_id] = chart
    return list(charts.values())
