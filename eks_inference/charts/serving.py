"""The engine extension point: the one class an engine extends, and the records it returns.

:class:`ServingEngine` adds to the spec layer's :class:`~eks_inference.specification.engines.Engine`
(its rules, accelerators, loaders and Services) everything else that depends on the engine:
the objects of its server chart, built with :mod:`eks_inference.charts.pod`; where the load
balancer sends its requests (:class:`Backend`); which of its pods serve and which port
Prometheus scrapes; the network flows of its own beyond those every deployment has; how it is
observed (its metric vocabulary, replica series and dashboard kind); and whether it is
autoscaled by KEDA. Every chart that differs by engine asks :func:`serving_engine`; none
compares ``spec.engine``.

Nothing here imports cdk8s: an engine builds plain Kubernetes JSON, which
:func:`eks_inference.charts.deployment.deployment_charts` wraps in a chart.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.model_server import OPENAI_PORT
from eks_inference.charts.pod import Json
from eks_inference.metrics import Metric
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.specification.engines import Engine, engine_of

if TYPE_CHECKING:
    from eks_inference.charts.context import RenderContext
    from eks_inference.charts.mountpoint import MountpointVolume
    from eks_inference.specification.deployment import ModelDeploymentSpec
    from eks_inference.specification.platform import Placement
    from eks_inference.specification.routes import Route


class WeightsVolume(Protocol):
    """The weights volume an engine's pods mount: a Mountpoint or an FSx for Lustre volume,
    of which the engine reads only the claim (what to mount is the loader's,
    :meth:`~eks_inference.charts.weights_loaders.WeightsLoader.pod`)."""

    @property
    def claim_name(self) -> str: ...


@dataclass(frozen=True)
class ChartObjects:
    """The content of one chart: its Kubernetes objects and what they need from the platform."""

    objects: tuple[Json, ...]
    needs: PlatformNeeds


@dataclass(frozen=True)
class Backend:
    """Where a deployment's load-balancer target group sends requests, and how it checks them.

    ``service`` is the Service serving the OpenAI API (in the inference namespace on port 8000
    unless ``namespace`` and ``port`` say otherwise), ``health_path`` the path its pods answer
    200 on once they serve (the target group's health check, on ``health_port`` when the
    traffic port has no such path), and ``deregistration_delay_seconds`` how long the load
    balancer drains a target: the pods' termination grace, so a generation in flight is
    never cut off. ``host_header`` is the Host the load balancer sets on every request, for a
    Service that routes by host (a Knative gateway); the deployment's Ingress is created in
    the Service's namespace. The paths it is sent are the route's
    (:attr:`~eks_inference.specification.routes.Route.api_paths`, the engine's
    :meth:`~eks_inference.specification.engines.Engine.api_paths`).
    """

    service: str
    health_path: str
    deregistration_delay_seconds: int
    namespace: str = INFERENCE_NAMESPACE
    port: int = OPENAI_PORT
    health_port: int | None = None
    host_header: str | None = None


@dataclass(frozen=True)
class MetricsTarget:
    """Pods Prometheus scrapes, by one PodMonitor named ``<deployment>-<name>``."""

    name: str
    selector: Json
    port: str


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


class ServingEngine(Engine):
    """An engine: everything about a deployment that depends on what serves it.

    A subclass sets :attr:`name`, :attr:`summary` and :attr:`component`, implements the
    abstract methods, overrides what differs from the defaults (Mountpoint volumes owned by
    root, no flows of its own, no KEDA autoscaler, no image built by the CDK app), and is
    registered once: ``ENGINES.register(MyEngine())`` (built-ins: in
    :mod:`eks_inference.engines`). ``docs/adding-an-engine.md`` walks through one.
    """

    #: Role of its server chart (``<deployment>-<component>``).
    component: ClassVar[str]
    #: (uid, gid) its pods read Mountpoint volumes as, when not root.
    volume_owner: ClassVar[tuple[int, int] | None] = None
    #: CRDs of the objects its server chart renders that an optional add-on installs (the
    #: reference stack adds the add-on providing them only when a deployment needs them).
    custom_resources: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def server(
        self,
        spec: ModelDeploymentSpec,
        placement: Placement,
        context: RenderContext,
        *,
        weights: WeightsVolume | None,
        artifacts: MountpointVolume | None,
        route: Route | None,
    ) -> ChartObjects:
        """The objects of the model server of ``spec`` and what they need.

        ``weights`` is the volume of the weights (``None`` when the loader needs none),
        ``artifacts`` the Mountpoint volume of the compiled Neuron artifacts, ``route`` where
        the deployment is exposed on the load balancer (``None``: in-cluster only).
        """

    @abstractmethod
    def backend(self, spec: ModelDeploymentSpec) -> Backend:
        """Where the load balancer sends ``spec``'s requests."""

    @abstractmethod
    def server_components(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        """Component labels of the pods that serve the OpenAI port and expose metrics."""

    @abstractmethod
    def metrics_targets(self, spec: ModelDeploymentSpec) -> tuple[MetricsTarget, ...]:
        """The pods and named port Prometheus scrapes."""

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

    def network_policies(
        self, spec: ModelDeploymentSpec, labels: Mapping[str, str], servers: Json
    ) -> list[Json]:
        """NetworkPolicies of the engine's own flows (``servers`` selects its serving pods)."""
        return []

    def own_alerts(self, spec: ModelDeploymentSpec) -> tuple[EngineAlert, ...]:
        """Alerts on the engine's own metrics, beside every deployment's four."""
        return ()

    def own_panels(self, spec: ModelDeploymentSpec) -> tuple[EnginePanel, ...]:
        """A dashboard row of panels on the engine's own metrics, below every deployment's."""
        return ()

    def autoscaled_by_keda(self, spec: ModelDeploymentSpec) -> bool:
        """Whether ``spec`` gets a KEDA ScaledObject on its queue depth and KV-cache use."""
        return False

    def scale_to_zero_delay_seconds(self, spec: ModelDeploymentSpec) -> int:
        """With ``scales_to_zero``: seconds from the last request until the last replica's
        pod is gone, freeing its node (an idle stretch shorter than this saves nothing).
        An engine that keeps a replica after its traffic stops says how long; default 0."""
        return 0

    def needs_neuron_ray_image(self, spec: ModelDeploymentSpec) -> bool:
        """Whether ``spec``'s pods run the Ray + Neuron image the CDK app builds."""
        return False


def serving_engine(spec: ModelDeploymentSpec) -> ServingEngine:
    """The engine serving ``spec``, with everything it renders."""
    engine = engine_of(spec)
    if not isinstance(engine, ServingEngine):
        raise TypeError(
            f"engine {engine.name!r} is registered as a {type(engine).__qualname__}, which "
            "renders nothing; engines extend eks_inference.charts.serving.ServingEngine"
        )
    return engine
