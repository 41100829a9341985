"""The two cdk8s chart classes every chart of the project is: plain objects, and what they need.

The only module of the charts layer that the charts' object builders do not need: they build
plain JSON, so an engine or a loader can be read, tested and rendered to YAML without a
cdk8s app; a chart wraps their output when it is applied by CDK or ordered in an app.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import cdk8s
from constructs import Construct

from eks_inference.charts.common import chart_id, check_object_size
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.spec.deployment import ModelDeploymentSpec


class ObjectsChart(cdk8s.Chart):
    """A cdk8s chart of plain Kubernetes objects and what they need from the platform.

    The objects are JSON built in Python (:mod:`eks_inference.charts.pod` builds every pod)
    and :meth:`to_json` returns them, so a chart costs one call into cdk8s (creating the
    chart) rather than two or more per object. It is still a cdk8s chart: it lives in a
    :class:`cdk8s.App`, is ordered after the charts it depends on (``add_dependency``) and can
    be given to ``cluster.add_cdk8s_chart``, whose call to ``toJson`` reaches :meth:`to_json`.
    ``needs`` is the chart's side of the contract with the platform
    (:class:`~eks_inference.charts.contract.PlatformNeeds`); ``role`` names the chart.
    """

    def __init__(
        self,
        scope: Construct,
        chart_id: str,
        role: str,
        objects: Sequence[dict[str, Any]],
        needs: PlatformNeeds,
    ) -> None:
        for obj in objects:
            check_object_size(obj)
        super().__init__(scope, chart_id, disable_resource_name_hashes=True)
        self.role = role
        self.objects: tuple[dict[str, Any], ...] = tuple(objects)
        self.needs = needs

    def to_json(self) -> list[Any]:
        """The chart's objects, as a deep copy: callers may change what they get."""
        return copy.deepcopy(list(self.objects))


class DeploymentChart(ObjectsChart):
    """One chart of one deployment, with the id ``<deployment>-<role>`` (:func:`chart_id`)."""

    def __init__(
        self,
        scope: Construct,
        spec: ModelDeploymentSpec,
        role: str,
        objects: Sequence[dict[str, Any]],
        needs: PlatformNeeds,
    ) -> None:
        super().__init__(scope, chart_id(spec.name, role), role, objects, needs)
        self.deployment_name = spec.name
