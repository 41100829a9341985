"""How an engine is observed: the records it describes its metrics with, and the interface.

Every deployment is read through the same quantities (requests running and waiting, KV-cache
use, time to first token, inter-token latency, end-to-end latency, tokens), under each
engine's own metric names (:class:`EngineMetrics`); its replicas through PromQL the engine
writes (:class:`ReplicaSeries`); and an engine may add alerts and dashboard panels on metrics
of its own (:class:`EngineAlert`, :class:`EnginePanel`). :class:`ObservedEngine` is the part of
an engine that says all this; :mod:`eks_inference.observability.signals` and the dashboards
read it through :func:`observed_engine`, so that observation never imports the charts that
render the engine (the engine classes, in :mod:`eks_inference.engines`, extend both).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eks_inference.metrics import Metric
from eks_inference.specification.engine_registry import not_implementing
from eks_inference.specification.engines import engine_of

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec


@dataclass(frozen=True)
class EngineMetrics:
    """The metrics a deployment is read through: its engine's names for each quantity.

    ``running`` and ``kv_cache`` are ``None`` for an engine that exports neither (Triton's vLLM
    backend reports tokens and latencies only); its dashboards and alerts then go without
    them rather than read a series nothing emits.
    """

    running: Metric | None
    waiting: tuple[Metric, ...]
    kv_cache: Metric | None
    ttft: Metric
    itl: Metric
    e2e: Metric
    prompt_tokens: Metric
    generation_tokens: Metric


@dataclass(frozen=True)
class EngineAlert:
    """An alert of the engine's own, beside those every deployment gets (PromQL ``expr``)."""

    name: str
    expr: str
    for_seconds: int
    severity: str
    summary: str
    description: str


@dataclass(frozen=True)
class EnginePanel:
    """A dashboard panel of the engine's own: ``series`` are (PromQL, legend) pairs."""

    title: str
    description: str
    unit: str
    series: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ReplicaSeries:
    """PromQL for a deployment's replicas: ready, wanted, loading, and the loading alert.

    ``loading_alert_seconds`` is how long a replica may load before an alert fires: from when
    the series counts it as loading, so it covers what the engine's own series cover.
    """

    ready: str
    wanted: str
    loading: str
    loading_alert_seconds: int


@dataclass(frozen=True)
class DeploymentKind:
    """A deployment's engine on its accelerator: its dashboard's tag and title."""

    tag: str
    display_name: str


class ObservedEngine(ABC):
    """The part of an engine that says how its deployments are observed."""

    @abstractmethod
    def kind(self, spec: ModelDeploymentSpec) -> DeploymentKind:
        """The deployment's kind: its dashboard's tag and title."""

    @abstractmethod
    def metrics(self, spec: ModelDeploymentSpec) -> EngineMetrics:
        """The engine's names for the quantities every dashboard and alert reads."""

    @abstractmethod
    def replica_series(
        self, spec: ModelDeploymentSpec, selector: Mapping[str, str], pods: str
    ) -> ReplicaSeries:
        """PromQL for ready, wanted and loading replicas of ``spec``.

        ``selector`` holds the label matchers of the deployment's series, ``pods`` an
        expression with one series per pod of the deployment (``kube_pod_labels``), to join.
        """

    @abstractmethod
    def autoscaler(self, spec: ModelDeploymentSpec) -> str:
        """What scales ``spec`` and on what, in one sentence for the plan and dashboards."""

    def queue_threshold(self, per_replica: int, alert: int) -> str:
        """The queue thresholds the platform acts on, as the plan's watch list shows them."""
        return f"> {per_replica} per replica scales out; alert above {alert} and rising"

    def own_alerts(self, spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
        """Alerts on the engine's own metrics, beside every deployment's four."""
        return ()

    def own_panels(self, spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
        """A dashboard row of panels on the engine's own metrics, below every deployment's."""
        return ()


def observed_engine(spec: ModelDeploymentSpec) -> ObservedEngine:
    """The engine serving ``spec``, as observation reads it."""
    engine = engine_of(spec)
    if not isinstance(engine, ObservedEngine):
        raise not_implementing(engine, ObservedEngine)
    return engine
