"""How a deployment is observed: the queries and thresholds to watch, and its dashboards.

:mod:`~eks_inference.observability.signals` turns a spec into PromQL and thresholds, reading
the metric names its engine gives
(:meth:`~eks_inference.observability.observed.ObservedEngine.metrics`,
in :mod:`~eks_inference.observability.observed`, with the records engines describe them with);
:mod:`~eks_inference.observability.dashboards` lays them out as Grafana dashboards.
The monitoring and autoscaling charts, and ``eks-inference plan``, all read them, so a
threshold on a dashboard is the one an alert fires at.
"""
