"""The class an engine extends, and the records of what it renders.

:class:`ServingEngine` joins the spec layer's core
(:class:`~eks_inference.specification.engines.Engine`: name, options, rules, accelerators,
loaders, Services, capabilities) and observation's
(:class:`~eks_inference.observability.observed.ObservedEngine`: metric names, replica series,
alerts, panels), and adds what the engine renders: the objects of its server chart, built with
:mod:`eks_inference.charts.pod`; where the load balancer sends its requests (:class:`Backend`);
which of its pods serve and which port Prometheus scrapes; the network flows of its own beyond
those every deployment has; and what it needs from the platform before anything is rendered
(:meth:`ServingEngine.platform_needs`, which reaches the CDK layer through :func:`engine_needs`).
Every chart that differs by engine asks :func:`serving_engine`; none compares ``spec.engine``.

Nothing here imports cdk8s: an engine builds plain Kubernetes JSON, which
:func:`eks_inference.charts.deployment.deployment_charts` wraps in a chart.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple, Protocol

from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.metadata import selector_labels
from eks_inference.charts.model_server import HTTP_PORT_NAME, OPENAI_PORT
from eks_inference.charts.pod import Json
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.observability.observed import ObservedEngine
from eks_inference.specification.engine_registry import not_implementing
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


class ServerInputs(NamedTuple):
    """What an engine's server chart is given: the spec, and what the deployment's other
    charts made for it (a tuple, so that an engine unpacks what it reads in one line).

    ``placement`` is the node pools its pods go to, ``context`` the values from outside the
    spec (bucket, region, images), ``weights`` the volume of the weights (``None`` when the
    loader needs none), ``artifacts`` the Mountpoint volume of the compiled Neuron artifacts,
    ``route`` where the deployment is exposed on the load balancer (``None``: in-cluster
    only).
    """

    spec: ModelDeploymentSpec
    placement: Placement
    context: RenderContext
    weights: WeightsVolume | None
    artifacts: MountpointVolume | None
    route: Route | None


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
    """Pods Prometheus scrapes, by one PodMonitor named ``<deployment>-<name>``.

    ``pod_labels`` are pod labels copied onto every series of these pods, each under a label
    name of its own (pod label, series label): how a query tells apart pods of one deployment
    that play different parts (a Dynamo graph's prefill and decode workers)."""

    name: str
    selector: Json
    port: str
    pod_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ScaleTarget:
    """One object a KEDA ScaledObject ``name`` scales through its scale subresource
    (``api_version``, ``kind``, ``target``), between ``min_replicas`` and ``max_replicas``.

    ``triggers`` are KEDA's triggers for it; ``None``: the deployment's own queue-depth and
    KV-cache triggers (:func:`eks_inference.charts.autoscaling.triggers`)."""

    name: str
    api_version: str
    kind: str
    target: str
    min_replicas: int
    max_replicas: int
    triggers: tuple[Json, ...] | None = None


class ServingEngine(Engine, ObservedEngine):
    """An engine: everything about a deployment that depends on what serves it.

    A subclass sets :attr:`name`, :attr:`summary` and :attr:`component`, implements the
    abstract methods (:meth:`services`, :meth:`server`, :meth:`backend`, and observation's
    :meth:`kind`, :meth:`metrics`, :meth:`replica_series`, :meth:`autoscaler`), lists what only
    it does among its :attr:`capabilities`, overrides what differs from the defaults (one
    serving component, scraped on its ``http`` port; no flows of its own; nothing needed from
    the platform before rendering), and is registered once: ``ENGINES.register(MyEngine())``
    (built-ins: :mod:`eks_inference.engines.built_in`). ``docs/adding-an-engine.md`` walks
    through one.
    """

    #: Role of its server chart (``<deployment>-<component>``), and the component label of
    #: its serving pods unless :meth:`server_components` says otherwise.
    component: ClassVar[str]

    @abstractmethod
    def server(self, given: ServerInputs) -> ChartObjects:
        """The objects of the model server of ``given.spec`` and what they need."""

    @abstractmethod
    def backend(self, spec: ModelDeploymentSpec) -> Backend:
        """Where the load balancer sends ``spec``'s requests."""

    def server_components(self, spec: ModelDeploymentSpec) -> tuple[str, ...]:
        """Component labels of the pods that serve the OpenAI port and expose metrics."""
        return (self.component,)

    def metrics_targets(self, spec: ModelDeploymentSpec) -> tuple[MetricsTarget, ...]:
        """The pods and named port Prometheus scrapes: each serving component's pods, on the
        port named ``http``."""
        return tuple(
            MetricsTarget(c, {"matchLabels": selector_labels(spec, c)}, HTTP_PORT_NAME)
            for c in self.server_components(spec)
        )

    def scale_targets(self, spec: ModelDeploymentSpec) -> tuple[ScaleTarget, ...]:
        """What KEDA scales when ``spec`` has ``scaling.autoscale``: the Deployment of the
        deployment's name, between its ``min_replicas`` and ``max_replicas``, on its queue and
        KV cache."""
        scaling = spec.scaling
        return (
            ScaleTarget(
                spec.name,
                "apps/v1",
                "Deployment",
                spec.name,
                scaling.min_replicas,
                scaling.max_replicas,
            ),
        )

    def network_policies(
        self, spec: ModelDeploymentSpec, labels: Mapping[str, str], servers: Json
    ) -> list[Json]:
        """NetworkPolicies of the engine's own flows (``servers`` selects its serving pods)."""
        return []

    def platform_needs(self, spec: ModelDeploymentSpec) -> PlatformNeeds:
        """What ``spec``'s objects need from the platform before any is rendered: the CRDs of
        an optional add-on, an image the CDK app builds. Added to the server chart's needs."""
        return PlatformNeeds()


def serving_engine(spec: ModelDeploymentSpec) -> ServingEngine:
    """The engine serving ``spec``, with everything it renders."""
    engine = engine_of(spec)
    if not isinstance(engine, ServingEngine):
        raise not_implementing(engine, ServingEngine)
    return engine


def engine_needs(spec: ModelDeploymentSpec) -> PlatformNeeds:
    """What the engine of ``spec`` needs from the platform before its objects are rendered:
    how the CDK layer learns which add-ons and images a deployment needs."""
    return serving_engine(spec).platform_needs(spec)
