"""Every chart of one deployment, in apply order, and the record the later charts take.

:func:`deployment_charts` renders what serves a deployment (its NetworkPolicies, the
Mountpoint volumes its loader and its compiled artifacts need, and its engine's server chart)
and returns a :class:`RenderedDeployment`. The compile job, the observability charts and the
Ingress take that record, so they mount the very claims serving mounts, run under the very
policies and route to the very server, rendered with the same context.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import cdk8s

from eks_inference.artifacts import artifact_prefix
from eks_inference.charts.autoscaling import AutoscalingChart
from eks_inference.charts.chart import DeploymentChart, ObjectsChart
from eks_inference.charts.common import (
    ARTIFACTS_ROLE,
    WEIGHTS_ROLE,
    RenderContext,
    artifact_key_digest,
    chart_id,
)
from eks_inference.charts.compile_job import CompileJobChart
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.endpoint import EndpointChart
from eks_inference.charts.engines.base import serving_engine
from eks_inference.charts.loading import loader_of
from eks_inference.charts.lustre import LustreVolume, LustreVolumeChart
from eks_inference.charts.monitoring import MonitoringChart
from eks_inference.charts.mountpoint import MountpointVolumeChart, deployment_volume
from eks_inference.charts.network_policy import NetworkPolicyChart
from eks_inference.spec.deployment import ModelDeploymentSpec
from eks_inference.spec.loader_rules import mountpoint_cache_gib
from eks_inference.spec.platform import Placement
from eks_inference.spec.routes import Route

# Compiled artifacts appear under their key when a compile job finishes, possibly after a
# serving pod first looked for them: a one-minute metadata TTL lets a waiting pod see them,
# where the indefinite TTL of weights would cache "not found" for the life of the mount.
_ARTIFACTS_METADATA_TTL = "60"


@dataclass(frozen=True)
class RenderedDeployment:
    """The serving charts of one deployment, and what they were rendered from.

    ``weights`` is the volume of the weights (Mountpoint or FSx for Lustre), ``None`` when
    the loader reads the weights without one; ``artifacts`` is ``None`` when the deployment
    has no compiled Neuron artifacts. :attr:`charts` lists them in apply order.
    """

    spec: ModelDeploymentSpec
    placement: Placement
    context: RenderContext
    route: Route | None
    policies: NetworkPolicyChart
    weights: MountpointVolumeChart | LustreVolumeChart | None
    artifacts: MountpointVolumeChart | None
    server: DeploymentChart

    @property
    def volumes(self) -> list[MountpointVolumeChart | LustreVolumeChart]:
        """The volume charts, weights first."""
        return [chart for chart in (self.weights, self.artifacts) if chart is not None]

    @property
    def charts(self) -> list[DeploymentChart]:
        """Policies, volumes, then the model server: the order they are applied in."""
        return [self.policies, *self.volumes, self.server]


def deployment_charts(
    app: cdk8s.App,
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    route: Route | None = None,
) -> RenderedDeployment:
    """Every chart serving one deployment, in apply order: policies, volumes, then the server.

    - ``<name>-network-policy``: the NetworkPolicies allowing the deployment's flows
      (:class:`NetworkPolicyChart`) in the namespace that denies all others.
    - ``<name>-model-weights``: the volume of the weights, when the loader mounts one
      (:func:`~eks_inference.charts.loading.loader_of`): the Mountpoint volume of the
      prefix, or the FSx for Lustre volume of the deployment's file system (from
      ``context.file_systems``).
    - ``<name>-neuron-artifacts``: on Inferentia2 with a compiled-artifacts prefix, the
      Mountpoint volume of exactly the deployment's artifact key.
    - ``<name>-<component>``: the model server, as its engine renders it
      (:meth:`~eks_inference.charts.engines.base.ServingEngine.server`).

    The server chart depends on the policy and volume charts (``add_dependency``), so an app
    that synthesizes them together orders them correctly and its pods start with their flows
    allowed; the namespace (:class:`~eks_inference.charts.namespace.NamespaceChart`) is shared
    by all deployments and must be applied before any. The volumes are owned by the user the
    engine's pods run as. With a ``route`` the server is configured for the load balancer
    (keep-alive, the API key when the route requires it); :func:`endpoint_charts` renders its
    Ingress.
    """
    engine = serving_engine(spec)
    cache_gib = mountpoint_cache_gib(spec)
    uid, gid = engine.volume_owner or (None, None)
    policies = NetworkPolicyChart(app, spec, context)

    def volume_chart(
        role: str, prefix: str, metadata_ttl: str, version: str | None = None
    ) -> MountpointVolumeChart:
        volume = deployment_volume(
            spec,
            role,
            bucket_name=context.bucket_name,
            region=context.region,
            prefix=prefix,
            cache_size_gib=cache_gib,
            metadata_ttl=metadata_ttl,
            uid=uid,
            gid=gid,
            version=version,
        )
        return MountpointVolumeChart(app, spec, role, volume)

    kind = loader_of(spec).volume_kind
    weights: MountpointVolumeChart | LustreVolumeChart | None = None
    if kind == "mountpoint":
        weights = volume_chart(WEIGHTS_ROLE, spec.weights.prefix, "indefinite")
    elif kind == "lustre":
        lustre = LustreVolume(chart_id(spec.name, WEIGHTS_ROLE), context.file_system(spec.name))
        weights = LustreVolumeChart(app, spec, WEIGHTS_ROLE, lustre)
    # Exactly the deployment's key: the Mountpoint driver reads no other artifact set, and a
    # new key (a change of shape) is a new volume the pods roll onto.
    artifacts = (
        volume_chart(
            ARTIFACTS_ROLE,
            artifact_prefix(spec),
            _ARTIFACTS_METADATA_TTL,
            version=artifact_key_digest(spec),
        )
        if spec.has_compiled_artifacts
        else None
    )
    content = engine.server(
        spec,
        placement,
        context,
        weights=weights.volume if weights is not None else None,
        artifacts=artifacts.volume if artifacts is not None else None,
        route=route,
    )
    server = DeploymentChart(app, spec, engine.component, content.objects, content.needs)
    rendered = RenderedDeployment(
        spec, placement, context, route, policies, weights, artifacts, server
    )
    server.add_dependency(policies, *rendered.volumes)
    return rendered


def compile_job_charts(app: cdk8s.App, rendered: RenderedDeployment) -> list[DeploymentChart]:
    """The Neuron compile job of one deployment, or nothing when it has no artifacts to compile.

    For an Inferentia2 deployment with a compiled-artifacts prefix: a
    ``<name>-compile-job`` chart (:class:`CompileJobChart`) that compiles the model with the
    deployment's own serving settings and publishes the artifacts at its key. It mounts the
    deployment's weights and artifacts volumes and runs under its NetworkPolicies (the job's
    pods are the deployment's), so it depends on them. GPU deployments and those compiling at
    start-up without a prefix get an empty list.

    The manifest writer always renders the job (next to the deployment's other manifests);
    the CDK side applies it when ``spec.neuron_options.run_compile_job`` is set::

        app = cdk8s.App()
        rendered = deployment_charts(app, spec, placement, context)
        charts = rendered.charts
        if spec.neuron_options.run_compile_job:
            charts += compile_job_charts(app, rendered)
    """
    weights = rendered.weights
    if not isinstance(weights, MountpointVolumeChart) or rendered.artifacts is None:
        return []
    chart = CompileJobChart(
        app,
        rendered.spec,
        rendered.placement,
        rendered.context,
        weights=weights.volume,
        artifacts=rendered.artifacts.volume,
    )
    chart.add_dependency(rendered.policies, *rendered.volumes)
    return [chart]


def observability_charts(app: cdk8s.App, rendered: RenderedDeployment) -> list[DeploymentChart]:
    """How one deployment is observed and, when its engine says so, scaled by KEDA.

    - ``<name>-monitoring`` (:class:`MonitoringChart`): PodMonitors, alert rules and the
      Grafana dashboard, for every deployment.
    - ``<name>-autoscaling`` (:class:`AutoscalingChart`): the KEDA ScaledObject, when the
      engine autoscales with KEDA (standalone vLLM with ``scaling.autoscale``); after the
      server it scales.

    Their objects are instances of the Prometheus Operator's and KEDA's CRDs (recorded in
    their needs), installed by the observability add-on.
    """
    spec = rendered.spec
    charts: list[DeploymentChart] = [MonitoringChart(app, spec)]
    if serving_engine(spec).autoscaled_by_keda(spec):
        autoscaling = AutoscalingChart(app, spec)
        autoscaling.add_dependency(rendered.server)
        charts.append(autoscaling)
    return charts


def endpoint_charts(app: cdk8s.App, rendered: RenderedDeployment) -> list[DeploymentChart]:
    """The deployment's Ingress on the platform's load balancer, or nothing if not exposed.

    ``<name>-endpoint`` (:class:`EndpointChart`), after the model server it routes to, for
    the route the server was rendered with. The Ingress takes the rendering's
    :class:`RenderContext`, so one ``vpc_cidr`` is both the network the policies admit the
    load balancer from and, without ``source_cidrs``, the network the load balancer admits
    clients from.
    """
    if rendered.route is None:
        return []
    chart = EndpointChart(app, rendered.spec, rendered.route, rendered.context)
    chart.add_dependency(rendered.server)
    return [chart]


def needs_of(charts: Iterable[ObjectsChart]) -> PlatformNeeds:
    """Everything ``charts`` need from the platform, together."""
    return PlatformNeeds.combined(chart.needs for chart in charts)
