"""Layer 2: cdk8s charts that turn a validated deployment spec into Kubernetes objects.

Nothing here imports aws-cdk: the CDK constructs apply these charts to a cluster and
:mod:`eks_inference.charts.render` writes them to ``k8s_manifests/``, both from the same code.
Every pod is built by :mod:`eks_inference.charts.pod`; every chart records what it needs from
the platform in a :class:`~eks_inference.charts.contract.PlatformNeeds`, which is all the
constructs read. Every node selector and toleration comes from a
:class:`~eks_inference.spec.platform.Placement`, every name another object refers to from that
object, and every image from :mod:`eks_inference.versions` or the :class:`RenderContext`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

import cdk8s

from eks_inference.artifacts import artifact_prefix
from eks_inference.charts.autoscaling import AutoscalingChart
from eks_inference.charts.common import (
    ARTIFACTS_ROLE,
    RAY_GID,
    RAY_UID,
    WEIGHTS_ROLE,
    DeploymentChart,
    ObjectsChart,
    RenderContext,
    artifact_key_digest,
    chart_id,
)
from eks_inference.charts.compile_job import CompileJobChart
from eks_inference.charts.contract import MountedPrefix, PlatformNeeds, ServiceAccountNeed
from eks_inference.charts.endpoint import ApiKeyChart, EndpointChart
from eks_inference.charts.monitoring import ExportersChart, MonitoringChart
from eks_inference.charts.mountpoint import (
    MountpointVolume,
    MountpointVolumeChart,
    cache_size_gib,
    deployment_volume,
)
from eks_inference.charts.namespace import NamespaceChart
from eks_inference.charts.network_policy import ROLE as NETWORK_POLICY_ROLE
from eks_inference.charts.network_policy import NetworkPolicyChart
from eks_inference.charts.rayservice import COMPONENT as RAY_COMPONENT
from eks_inference.charts.rayservice import RayServiceChart
from eks_inference.charts.vllm import COMPONENT as VLLM_COMPONENT
from eks_inference.charts.vllm import VllmChart
from eks_inference.load_budget import weights_gib
from eks_inference.spec.deployment import ModelDeploymentSpec
from eks_inference.spec.platform import Placement
from eks_inference.spec.routes import Route

# Compiled artifacts appear under their key when a compile job finishes, possibly after a
# serving pod first looked for them: a one-minute metadata TTL lets a waiting pod see them,
# where the indefinite TTL of weights would cache "not found" for the life of the mount.
_ARTIFACTS_METADATA_TTL = "60"
_Chart = TypeVar("_Chart", bound=DeploymentChart)


def deployment_charts(
    app: cdk8s.App,
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
    route: Route | None = None,
) -> list[DeploymentChart]:
    """Every chart of one deployment, in apply order: policies, volumes, then the model server.

    - ``<name>-network-policy``: the NetworkPolicies allowing the deployment's flows
      (:class:`NetworkPolicyChart`) in the namespace that denies all others.
    - ``<name>-model-weights``: the Mountpoint volume of the weights prefix, unless standalone
      vLLM streams the weights from S3 (``loader: runai_streamer``).
    - ``<name>-neuron-artifacts``: on Inferentia2 with a compiled-artifacts prefix, the
      Mountpoint volume of exactly the deployment's artifact key.
    - ``<name>-vllm`` or ``<name>-rayservice``: the model server, depending on the engine.

    The server chart depends on the policy and volume charts (``add_dependency``), so an app
    that synthesizes them together orders them correctly and its pods start with their flows
    allowed; the namespace (:class:`NamespaceChart`) is shared by all deployments and must be
    applied before any.
    Ray pods run as uid 1000, so their volumes are mounted with that owner. With a ``route``
    the server is configured for the load balancer (keep-alive, the API key when the route
    requires it); :func:`endpoint_charts` renders its Ingress.
    """
    ray = spec.engine == "rayservice"
    cache_gib = cache_size_gib(weights_gib(spec))
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
            uid=RAY_UID if ray else None,
            gid=RAY_GID if ray else None,
            version=version,
        )
        return MountpointVolumeChart(app, spec, role, volume)

    volumes: list[MountpointVolumeChart] = []
    weights: MountpointVolume | None = None
    if spec.weights.loader == "mountpoint":
        weights_chart = volume_chart(WEIGHTS_ROLE, spec.weights.prefix, "indefinite")
        volumes.append(weights_chart)
        weights = weights_chart.volume
    artifacts: MountpointVolume | None = None
    if spec.has_compiled_artifacts:
        # Exactly the deployment's key: the Mountpoint driver reads no other artifact set,
        # and a new key (a change of shape) is a new volume the pods roll onto.
        artifacts_chart = volume_chart(
            ARTIFACTS_ROLE,
            artifact_prefix(spec),
            _ARTIFACTS_METADATA_TTL,
            version=artifact_key_digest(spec),
        )
        volumes.append(artifacts_chart)
        artifacts = artifacts_chart.volume

    server_chart = RayServiceChart if ray else VllmChart
    server = server_chart(
        app, spec, placement, context, weights=weights, artifacts=artifacts, route=route
    )
    server.add_dependency(policies, *volumes)
    return [policies, *volumes, server]


def compile_job_charts(
    app: cdk8s.App,
    spec: ModelDeploymentSpec,
    placement: Placement,
    context: RenderContext,
) -> list[DeploymentChart]:
    """The Neuron compile job of one deployment, or nothing when it has no artifacts to compile.

    For an Inferentia2 deployment with a compiled-artifacts prefix: a
    ``<name>-compile-job`` chart (:class:`CompileJobChart`) that compiles the model with the
    deployment's own serving settings and publishes the artifacts at its key. It mounts the
    deployment's weights and artifacts volumes, so :func:`deployment_charts` must have
    rendered them into ``app`` first; the chart depends on them. GPU deployments and those
    compiling at start-up without a prefix get an empty list. The job's pods are the
    deployment's, so the job also depends on the deployment's NetworkPolicies.

    The manifest writer always renders the job (next to the deployment's other manifests);
    the CDK side applies it when ``spec.neuron_options.run_compile_job`` is set::

        app = cdk8s.App()
        charts = deployment_charts(app, spec, placement, context)
        if spec.neuron_options.run_compile_job:
            charts += compile_job_charts(app, spec, placement, context)
    """
    if not spec.has_compiled_artifacts:
        return []
    volumes = {
        role: _rendered_chart(app, spec, role, MountpointVolumeChart, "compile job")
        for role in (WEIGHTS_ROLE, ARTIFACTS_ROLE)
    }
    chart = CompileJobChart(
        app,
        spec,
        placement,
        context,
        weights=volumes[WEIGHTS_ROLE].volume,
        artifacts=volumes[ARTIFACTS_ROLE].volume,
    )
    policies = _rendered_chart(app, spec, NETWORK_POLICY_ROLE, NetworkPolicyChart, "compile job")
    chart.add_dependency(policies, *volumes.values())
    return [chart]


def _rendered_chart(
    app: cdk8s.App, spec: ModelDeploymentSpec, role: str, kind: type[_Chart], user: str
) -> _Chart:
    """The chart ``role`` that :func:`deployment_charts` rendered for ``spec`` in ``app``.

    Looked up by its :func:`chart_id`, so the compile job mounts the very claims serving
    mounts, named by their objects, and runs under the very policies, and the Ingress is
    rendered with the very context. ``user`` names the chart that needs it, for the error.
    """
    chart = app.node.try_find_child(chart_id(spec.name, role))
    if not isinstance(chart, kind):
        raise ValueError(
            f"deployment {spec.name!r}: the {user} needs the {role} chart of the "
            "deployment; render deployment_charts(app, spec, ...) into the same app first"
        )
    return chart


def observability_charts(app: cdk8s.App, spec: ModelDeploymentSpec) -> list[DeploymentChart]:
    """How one deployment is observed and, for autoscaled standalone vLLM, scaled.

    - ``<name>-monitoring`` (:class:`MonitoringChart`): PodMonitors, alert rules and the
      Grafana dashboard, for every deployment.
    - ``<name>-autoscaling`` (:class:`AutoscalingChart`): the KEDA ScaledObject, for
      ``engine: vllm`` with ``scaling.autoscale``; after the Deployment it scales.

    Their objects are instances of the Prometheus Operator's and KEDA's CRDs (recorded in
    their needs), installed by the observability add-on.
    """
    charts: list[DeploymentChart] = [MonitoringChart(app, spec)]
    if spec.engine == "vllm" and spec.scaling.autoscale:
        autoscaling = AutoscalingChart(app, spec)
        server = app.node.try_find_child(chart_id(spec.name, VLLM_COMPONENT))
        if isinstance(server, VllmChart):
            autoscaling.add_dependency(server)
        charts.append(autoscaling)
    return charts


def endpoint_charts(
    app: cdk8s.App, spec: ModelDeploymentSpec, route: Route | None
) -> list[DeploymentChart]:
    """The deployment's Ingress on the platform's load balancer, or nothing if not exposed.

    ``<name>-endpoint`` (:class:`EndpointChart`), after the model server it routes to. The
    server must be configured for the route, so :func:`deployment_charts` must have rendered
    the deployment into ``app`` first, with the same one; the Ingress takes that rendering's
    :class:`RenderContext` from the deployment's NetworkPolicies, so one ``vpc_cidr`` is both
    the network the policies admit the load balancer from and, without ``source_cidrs``, the
    network the load balancer admits clients from.
    """
    if route is None:
        return []
    policies = _rendered_chart(app, spec, NETWORK_POLICY_ROLE, NetworkPolicyChart, "Ingress")
    chart = EndpointChart(app, spec, route, policies.context)
    for role in (VLLM_COMPONENT, RAY_COMPONENT):
        server = app.node.try_find_child(chart_id(spec.name, role))
        if isinstance(server, DeploymentChart):
            chart.add_dependency(server)
    return [chart]


def needs_of(charts: Iterable[ObjectsChart]) -> PlatformNeeds:
    """Everything ``charts`` need from the platform, together."""
    return PlatformNeeds.combined(chart.needs for chart in charts)


__all__ = [
    "ApiKeyChart",
    "AutoscalingChart",
    "CompileJobChart",
    "DeploymentChart",
    "EndpointChart",
    "ExportersChart",
    "MonitoringChart",
    "MountedPrefix",
    "MountpointVolume",
    "MountpointVolumeChart",
    "NamespaceChart",
    "NetworkPolicyChart",
    "ObjectsChart",
    "PlatformNeeds",
    "RayServiceChart",
    "RenderContext",
    "ServiceAccountNeed",
    "VllmChart",
    "compile_job_charts",
    "deployment_charts",
    "endpoint_charts",
    "needs_of",
    "observability_charts",
]
