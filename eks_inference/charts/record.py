"""What every chart of the project is: a frozen record of plain objects and what they need.

A chart is data: an id, a role, its Kubernetes objects (JSON built in Python, every pod by
:mod:`eks_inference.charts.pod`), its side of the contract with the platform
(:class:`~eks_inference.charts.contract.PlatformNeeds`) and the charts it is applied after.
The functions of the chart modules return :class:`ChartRecord`; the manifest writer dumps
their objects, the CDK constructs apply them, and :mod:`eks_inference.charts.chart` wraps
one in a cdk8s chart where an app needs one. Nothing here imports cdk8s, so writing
``k8s_manifests/`` never starts a JavaScript runtime.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import check_object_size
from eks_inference.specification.deployment import ModelDeploymentSpec


@dataclass(frozen=True)
class ChartRecord:
    """One chart: its objects, what they need from the platform, and what it comes after.

    - ``chart_id``: unique among the charts applied together (a deployment's charts are
      ``<deployment>-<role>``, :func:`deployment_chart`).
    - ``role``: what the chart is (``network-policy``, ``model-weights``, ``endpoint``...);
      the manifest writer names a deployment's files after it.
    - ``objects``: the Kubernetes objects, in apply order; each at most
      :data:`~eks_inference.charts.metadata.MAX_OBJECT_BYTES` as JSON, refused otherwise.
    - ``needs``: what the objects need from the platform.
    - ``deployment_name``: the deployment the chart belongs to, ``None`` for the platform's
      own charts (namespace, exporters, API key, NodePools, traffic splits).
    - ``after``: ids of the charts that must be applied before this one (a server after
      its policies and volumes, an Ingress after its server); a cdk8s app orders its charts
      by them (:func:`eks_inference.charts.chart.cdk8s_charts`).
    """

    chart_id: str
    role: str
    objects: tuple[dict[str, Any], ...]
    needs: PlatformNeeds
    deployment_name: str | None = None
    after: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for obj in self.objects:
            check_object_size(obj)

    def to_json(self) -> list[Any]:
        """The chart's objects, as a deep copy: callers may change what they get."""
        return copy.deepcopy(list(self.objects))

    def applied_after(self, *charts: ChartRecord) -> ChartRecord:
        """This chart, applied after ``charts`` as well."""
        # A copy rather than dataclasses.replace, which would check every object's size again
        # (encoding it as JSON) although only the order changes.
        record = copy.copy(self)
        object.__setattr__(record, "after", (*self.after, *(chart.chart_id for chart in charts)))
        return record


def chart_id(deployment_name: str, role: str) -> str:
    """Id of a deployment's chart with ``role``: ``<deployment>-<role>``, unique in an app."""
    return f"{deployment_name}-{role}"


def deployment_chart(
    spec: ModelDeploymentSpec,
    role: str,
    objects: Sequence[dict[str, Any]],
    needs: PlatformNeeds,
    *,
    after: Sequence[ChartRecord] = (),
) -> ChartRecord:
    """The chart ``<deployment>-<role>`` of ``spec``'s deployment (:func:`chart_id`), applied
    after the charts ``after``."""
    return ChartRecord(
        chart_id=chart_id(spec.name, role),
        role=role,
        objects=tuple(objects),
        needs=needs,
        deployment_name=spec.name,
        after=tuple(chart.chart_id for chart in after),
    )
