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

from eks_inference.charts.artifacts_gate import artifact_key_digest
from eks_inference.charts.autoscaling import autoscaling_chart
from eks_inference.charts.compile_job import compile_job_chart
from eks_inference.charts.context import RenderContext
from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.ingress import endpoint_chart
from eks_inference.charts.lustre import LustreVolume, lustre_volume_chart
from eks_inference.charts.model_server import ARTIFACTS_ROLE, WEIGHTS_ROLE
from eks_inference.charts.monitoring import monitoring_chart
from eks_inference.charts.mountpoint import (
    MountpointVolume,
    deployment_volume,
    mountpoint_volume_chart,
)
from eks_inference.charts.network_policy import network_policy_chart
from eks_inference.charts.record import ChartRecord, chart_id, deployment_chart
from eks_inference.charts.routing import ROLE as ROUTER_ROLE
from eks_inference.charts.routing import router_needs, router_objects
from eks_inference.charts.serving import ServerInputs, serving_engine
from eks_inference.charts.weights_loaders import loader_of
from eks_inference.specification.artifacts import artifact_prefix
from eks_inference.specification.capabilities import ReadsVolumesAs
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import Placement
from eks_inference.specification.routes import Route
from eks_inference.specification.weights_rules import mountpoint_cache_gib

# Compiled artifacts appear under their key when a compile job finishes, possibly after a
# serving pod first looked for them: a one-minute metadata TTL lets a waiting pod see them,
# where the indefinite TTL of weights would cache "not found" for the life of the mount.
_ARTIFACTS_METADATA_TTL = "60"


@dataclass(frozen=True)
class RenderedDeployment:
    """The serving charts of one deployment, and what they were rendered from.

    ``weights`` is the chart of the weights' volume and ``weights_volume`` that volume
    (Mountpoint or FSx for Lustre), both ``None`` when the loader reads the weights without
    one; ``artifacts`` and ``artifacts_volume`` are ``None`` when the deployment has no
    compiled Neuron artifacts. :attr:`charts` lists the charts in apply order.
    """

    spec: ModelDeploymentSpec
    placement: Placement
    context: RenderContext
    route: Route | None
    policies: ChartRecord
    weights: ChartRecord | None
    weights_volume: MountpointVolume | LustreVolume | None
    artifacts: ChartRecord | None
    artifacts_volume: MountpointVolume | None
    server: ChartRecord
    router: ChartRecord | None = None
    """The endpoint picker and its proxy (``routing``); ``None`` without a picker."""

    @property
    def volumes(self) -> list[ChartRecord]:
        """The volume charts, weights first."""
        return [chart for chart in (self.weights, self.artifacts) if chart is not None]

    @property
    def charts(self) -> list[ChartRecord]:
        """Policies, volumes, the model server, then its picker: the order they are applied
        in."""
        routed = [self.router] if self.router is not None else []
        return [self.policies, *self.volumes, self.server, *routed]


def deployment_charts(
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    route: Route | None = None,
) -> RenderedDeployment:
    """Every chart serving one deployment, in apply order: policies, volumes, then the server.

    - ``<name>-network-policy``: the NetworkPolicies allowing the deployment's flows
      (:func:`~eks_inference.charts.network_policy.network_policy_chart`) in the namespace
      that denies all others.
    - ``<name>-model-weights``: the volume of the weights, when the loader mounts one
      (:func:`~eks_inference.charts.weights_loaders.loader_of`): the Mountpoint volume of the
      prefix, or the FSx for Lustre volume of the deployment's file system (from
      ``context.file_systems``).
    - ``<name>-neuron-artifacts``: on Inferentia2 with a compiled-artifacts prefix, the
      Mountpoint volume of exactly the deployment's artifact key.
    - ``<name>-<component>``: the model server, as its engine renders it
      (:meth:`~eks_inference.charts.serving.ServingEngine.server`).
    - ``<name>-router``: with an endpoint picker (``routing``), the InferencePool, the picker
      and its proxy (:mod:`~eks_inference.charts.routing`), after the server they route to.

    The server chart is applied after the policy and volume charts (its ``after``), so its
    pods start with their flows allowed and their claims bound; the namespace
    (:func:`~eks_inference.charts.namespace.namespace_chart`) is shared
    by all deployments and must be applied before any. The volumes are owned by the user the
    engine's pods run as. With a ``route`` the server is configured for the load balancer
    (keep-alive, the API key when the route requires it); :func:`endpoint_charts` renders its
    Ingress.
    """
    engine = serving_engine(spec)
    cache_gib = mountpoint_cache_gib(spec)
    owner = engine.capability(ReadsVolumesAs)
    uid, gid = (owner.uid, owner.gid) if owner is not None else (None, None)
    policies = network_policy_chart(spec, context)

    def mountpoint(
        role: str, prefix: str, metadata_ttl: str, version: str | None = None
    ) -> MountpointVolume:
        return deployment_volume(
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

    kind = loader_of(spec).volume_kind
    weights_volume: MountpointVolume | LustreVolume | None = None
    weights: ChartRecord | None = None
    if kind == "mountpoint":
        weights_volume = mountpoint(WEIGHTS_ROLE, spec.weights.prefix, "indefinite")
        weights = mountpoint_volume_chart(spec, WEIGHTS_ROLE, weights_volume)
    elif kind == "lustre":
        weights_volume = LustreVolume(
            chart_id(spec.name, WEIGHTS_ROLE), context.file_system(spec.name)
        )
        weights = lustre_volume_chart(spec, WEIGHTS_ROLE, weights_volume)
    # Exactly the deployment's key: the Mountpoint driver reads no other artifact set, and a
    # new key (a change of shape) is a new volume the pods roll onto.
    artifacts_volume: MountpointVolume | None = None
    artifacts: ChartRecord | None = None
    if spec.has_compiled_artifacts:
        artifacts_volume = mountpoint(
            ARTIFACTS_ROLE,
            artifact_prefix(spec),
            _ARTIFACTS_METADATA_TTL,
            version=artifact_key_digest(spec),
        )
        artifacts = mountpoint_volume_chart(spec, ARTIFACTS_ROLE, artifacts_volume)
    content = engine.server(
        ServerInputs(spec, placement, context, weights_volume, artifacts_volume, route)
    )
    volumes = [chart for chart in (weights, artifacts) if chart is not None]
    server = deployment_chart(
        spec,
        engine.component,
        content.objects,
        content.needs + engine.platform_needs(spec),
        after=[policies, *volumes],
    )
    routed = router_objects(spec, placement)
    router = (
        deployment_chart(
            spec, ROUTER_ROLE, routed, router_needs(spec, placement), after=[policies, server]
        )
        if routed
        else None
    )
    return RenderedDeployment(
        spec,
        placement,
        context,
        route,
        policies,
        weights,
        weights_volume,
        artifacts,
        artifacts_volume,
        server,
        router,
    )


def compile_job_charts(rendered: RenderedDeployment) -> list[ChartRecord]:
    """The Neuron compile job of one deployment, or nothing when it has no artifacts to compile.

    For an Inferentia2 deployment with a compiled-artifacts prefix: a
    ``<name>-compile-job`` chart
    (:func:`~eks_inference.charts.compile_job.compile_job_chart`) that compiles the model with the
    deployment's own serving settings and publishes the artifacts at its key. It mounts the
    deployment's weights and artifacts volumes and runs under its NetworkPolicies (the job's
    pods are the deployment's), so it is applied after them. GPU deployments and those compiling at
    start-up without a prefix get an empty list.

    The manifest writer always renders the job (next to the deployment's other manifests);
    the CDK side applies it when ``spec.neuron_options.run_compile_job`` is set::

        rendered = deployment_charts(spec, placement, context)
        charts = rendered.charts
        if spec.neuron_options.run_compile_job:
            charts += compile_job_charts(rendered)
    """
    weights = rendered.weights_volume
    if not isinstance(weights, MountpointVolume) or rendered.artifacts_volume is None:
        return []
    chart = compile_job_chart(
        rendered.spec,
        rendered.placement,
        rendered.context,
        weights=weights,
        artifacts=rendered.artifacts_volume,
    )
    return [chart.applied_after(rendered.policies, *rendered.volumes)]


def observability_charts(rendered: RenderedDeployment) -> list[ChartRecord]:
    """How one deployment is observed and, when its engine says so, scaled by KEDA.

    - ``<name>-monitoring`` (:func:`~eks_inference.charts.monitoring.monitoring_chart`):
      PodMonitors, alert rules and the
      Grafana dashboard, for every deployment.
    - ``<name>-autoscaling`` (:func:`~eks_inference.charts.autoscaling.autoscaling_chart`):
      the KEDA ScaledObject, when the
      engine autoscales with KEDA (standalone vLLM with ``scaling.autoscale``); after the
      server it scales.

    Their objects are instances of the Prometheus Operator's and KEDA's CRDs (recorded in
    their needs), installed by the observability add-on.
    """
    spec = rendered.spec
    charts = [monitoring_chart(spec)]
    # Validation allows autoscale only on an engine that autoscales on its queue.
    if spec.scaling.autoscale:
        charts.append(autoscaling_chart(spec).applied_after(rendered.server))
    return charts


def endpoint_charts(rendered: RenderedDeployment) -> list[ChartRecord]:
    """The deployment's Ingress on the platform's load balancer, or nothing if not exposed.

    ``<name>-endpoint`` (:func:`~eks_inference.charts.ingress.endpoint_chart`), after the
    model server it routes to, for the route the server was rendered with. The Ingress takes
    the rendering's :class:`RenderContext`, so one ``vpc_cidr`` is both the network the
    policies admit the load balancer from and, without ``source_cidrs``, the network the load
    balancer admits clients from.
    """
    if rendered.route is None:
        return []
    chart = endpoint_chart(rendered.spec, rendered.route, rendered.context)
    # A routed deployment's Ingress forwards to its proxy, which must exist first.
    routed = [rendered.router] if rendered.router is not None else []
    return [chart.applied_after(rendered.server, *routed)]


def needs_of(charts: Iterable[ChartRecord]) -> PlatformNeeds:
    """Everything ``charts`` need from the platform, together."""
    return PlatformNeeds.combined(chart.needs for chart in charts)
