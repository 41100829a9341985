"""Render a platform's charts to plain objects and to the text of the ``k8s_manifests/`` files.

The same charts the CDK constructs apply are rendered here without CDK, so the manifests can
be reviewed, diffed and used with GitOps tools. The charts are plain records
(:class:`~eks_inference.charts.record.ChartRecord`), so rendering imports neither cdk8s nor
aws-cdk and starts no JavaScript runtime; ``tests/charts/test_cdk8s_render.py`` holds the files
byte-identical to the ones written from the same records wrapped in a cdk8s app.

Output is deterministic (stable order, no timestamps), and rendered whole in memory before
anything is written: the manifest writer (:mod:`eks_inference.output.writer`) writes it all or
nothing.

Layout::

    k8s_manifests/
      namespace.yaml
      exporters.yaml                         (accelerator metrics exporters and their monitors)
      api-key.yaml                           (with an endpoint requiring API keys)
      karpenter-node-pools.yaml              (Karpenter mode: EC2NodeClasses and NodePools)
      .eks-inference-manifests               (the writer's marker: every file it wrote)
      <deployment>/01-network-policy.yaml    (one file per chart, in apply order)
      <deployment>/02-model-weights.yaml
      <deployment>/03-neuron-artifacts.yaml
      <deployment>/04-rayservice.yaml
      <deployment>/05-compile-job.yaml       (Neuron deployments with compiled artifacts)
      <deployment>/NN-autoscaling.yaml       (autoscaled standalone vLLM: the ScaledObject)
      <deployment>/NN-monitoring.yaml        (its monitor, alerts and dashboard)
      <deployment>/NN-endpoint.yaml          (exposed deployments: the Ingress, last)

The compile job is written for every Neuron deployment with a compiled-artifacts prefix,
whether or not the CDK app applies it (``run_compile_job``), so it can be run by hand with
``kubectl apply -f``; apply order does not matter for it, since serving pods wait for its
completion marker.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eks_inference.charts.context import LustreMount, RenderContext
from eks_inference.charts.deployment import (
    compile_job_charts,
    deployment_charts,
    endpoint_charts,
    needs_of,
    observability_charts,
)
from eks_inference.charts.ingress import api_key_chart
from eks_inference.charts.karpenter import (
    karpenter_offers,
    platform_karpenter_chart,
    platform_offers,
)
from eks_inference.charts.monitoring import exporters_chart, neuron_pools, rendered_per_kind
from eks_inference.charts.namespace import namespace_chart
from eks_inference.charts.ownership import ObjectOwners
from eks_inference.charts.record import ChartRecord
from eks_inference.charts.scheduling import check_schedulable
from eks_inference.charts.traffic_split import traffic_split_chart
from eks_inference.output.writer import FILE_HEADER
from eks_inference.output.yaml_dump import dump_yaml
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.routes import api_key_secret_name
from eks_inference.specification.startup_budget import weights_gib
from eks_inference.specification.validation import Problems
from eks_inference.specification.weights import lustre_capacity_gib

NAMESPACE_FILE = "namespace.yaml"
# The Karpenter EC2NodeClasses and NodePools of a platform in Karpenter mode.
KARPENTER_FILE = "karpenter-node-pools.yaml"
# The SecretStore and ExternalSecret of the platform's API key (applied after the External
# Secrets Operator; the CDK app installs it and creates the key in Secrets Manager).
API_KEY_FILE = "api-key.yaml"
# neuron-monitor and its PodMonitor, for platforms with Neuron pools (the other exporters and
# the metrics stack are Helm releases of the CDK app).
EXPORTERS_FILE = "exporters.yaml"
# The Ingresses of the endpoint's traffic splits, applied after every deployment.
SPLITS_FILE = "traffic-splits.yaml"


def default_context(platform: PlatformSpec) -> RenderContext:
    """The render context of ``platform`` outside CDK: its bucket, region and image registry.

    The Neuron Ray image is a container asset the CDK app builds; its URI in the platform's
    account and region comes from :func:`eks_inference.serve.image.asset_image_uri`.
    Imported FSx for Lustre file systems are named in the spec; one the stack creates is
    known only once deployed, so rendering its deployment outside CDK fails
    (:class:`~eks_inference.charts.context.MissingFileSystemError`).
    """
    from eks_inference.serve.image import asset_image_uri

    return RenderContext(
        bucket_name=platform.model_bucket_name,
        region=platform.region,
        neuron_ray_image=asset_image_uri(platform.account_id, platform.region),
        file_systems=imported_file_systems(platform),
    )


def imported_file_systems(platform: PlatformSpec) -> tuple[tuple[str, LustreMount], ...]:
    """The FSx for Lustre file systems the deployments of ``platform`` import, by name."""
    found = []
    for spec in platform.deployments:
        lustre = spec.weights.fsx
        if lustre is None or lustre.file_system_id is None:
            continue
        mount = LustreMount(
            file_system_id=lustre.file_system_id,
            dns_name=lustre.dns_name or "",
            mount_name=lustre.mount_name or "",
            capacity_gib=lustre_capacity_gib(lustre, weights_gib(spec)),
        )
        found.append((spec.name, mount))
    return tuple(found)


def _all_charts(
    platform: PlatformSpec, context: RenderContext, karpenter: ChartRecord | None
) -> dict[str, list[ChartRecord]]:
    """Every chart of every deployment, in file order: serving charts, the compile job, then
    monitoring and autoscaling, then the Ingress (each after the others, so the serving files
    keep their numbers). ``karpenter`` is the platform's NodePools chart, if any. Each kind of
    deployment's monitoring is rendered once (:func:`rendered_per_kind`)."""
    charts: dict[str, list[ChartRecord]] = {}
    routes = platform.routes()
    owners = ObjectOwners()
    problems = Problems("PlatformSpec")
    with rendered_per_kind():
        for index, spec in enumerate(platform.deployments):
            placement = platform.placement(spec)
            route = routes.get(spec.name)
            rendered = deployment_charts(spec, placement, context, route)
            charts[spec.name] = [
                *rendered.charts,
                *compile_job_charts(rendered),
                *observability_charts(rendered),
                *endpoint_charts(rendered),
            ]
            shared = owners.claim(spec.name, (o for c in charts[spec.name] for o in c.objects))
            if shared is not None:
                problems.add(("deployments", index, "name"), shared, spec.name)
    problems.raise_if_any()
    # A pod no node of its pool can run would be Pending forever: refuse to render it.
    check_schedulable(
        platform,
        {name: needs_of(deployment) for name, deployment in charts.items()},
        platform_offers(platform, karpenter_offers(karpenter.objects) if karpenter else ()),
    )
    return charts


def platform_charts(
    platform: PlatformSpec, context: RenderContext | None = None
) -> dict[str, ChartRecord]:
    """Every chart of ``platform``, by the file it is written to (relative path), in write
    order: the platform's own charts, each deployment's, then the traffic splits."""
    context = context or default_context(platform)
    charts = {NAMESPACE_FILE: namespace_chart()}
    exporters = exporters_chart(neuron_pools(platform.node_pools))
    if exporters.objects:
        charts[EXPORTERS_FILE] = exporters
    if platform.endpoint is not None and platform.endpoint.authentication == "api_key":
        charts[API_KEY_FILE] = api_key_chart(
            secret_id=api_key_secret_name(platform.cluster_name), region=platform.region
        )
    karpenter = platform_karpenter_chart(platform)
    if karpenter is not None:
        charts[KARPENTER_FILE] = karpenter
    for name, deployment in _all_charts(platform, context, karpenter).items():
        for index, chart in enumerate(deployment, start=1):
            charts[f"{name}/{index:02d}-{chart.role}.yaml"] = chart
    splits = split_chart(platform, context)
    if splits is not None:
        charts[SPLITS_FILE] = splits
    return charts


def manifest_text(objects: Iterable[dict[str, Any]]) -> str:
    """The text of a manifest file of ``objects``: the header, then one YAML document each."""
    return FILE_HEADER + dump_yaml(list(objects))


def render_files(platform: PlatformSpec, context: RenderContext | None = None) -> dict[str, str]:
    """Every manifest file of ``platform``: relative path -> YAML text, in write order."""
    return {
        path: manifest_text(chart.objects)
        for path, chart in platform_charts(platform, context).items()
    }


def split_chart(platform: PlatformSpec, context: RenderContext) -> ChartRecord | None:
    """The Ingresses of ``platform``'s traffic splits, or ``None`` when it has none."""
    splits = platform.splits()
    if not splits:
        return None
    deployments = {spec.name: spec for spec in platform.deployments}
    return traffic_split_chart(splits, deployments, context.vpc_cidr)


def render_platform(
    platform: PlatformSpec, context: RenderContext | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every deployment's objects, in file order: deployment name -> Kubernetes objects.

    The same objects as :func:`render_files`, compile jobs included. The shared namespace is
    not part of any deployment; see :func:`namespace_chart`. ``context`` defaults to
    :func:`default_context`.
    """
    context = context or default_context(platform)
    return {
        name: [document for chart in charts for document in chart.to_json()]
        for name, charts in _all_charts(
            platform, context, platform_karpenter_chart(platform)
        ).items()
    }
