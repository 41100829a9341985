"""``ModelDeployment``: one model served on the cluster, with exactly the S3 access it needs.

The construct applies the charts of one
:class:`~eks_inference.specification.deployment.ModelDeploymentSpec` (the
same charts :mod:`eks_inference.charts.render` writes to ``k8s_manifests/``) to an
:class:`~eks_inference.constructs.InferenceCluster` and gives the pods, and only them, read
access to their own prefixes of the :class:`~eks_inference.constructs.ModelBucket`.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import cast
from weakref import WeakKeyDictionary

from aws_cdk import AssetHashType, AssetStaging, CustomResource, RemovalPolicy, Stack, Token
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IConstruct

from eks_inference import names
from eks_inference.charts.autoscaling import ROLE as AUTOSCALING_ROLE
from eks_inference.charts.context import RenderContext
from eks_inference.charts.contract import MountedPrefix, ServiceAccountNeed
from eks_inference.charts.deployment import (
    compile_job_charts,
    deployment_charts,
    endpoint_charts,
    needs_of,
    observability_charts,
)
from eks_inference.charts.record import ChartRecord
from eks_inference.charts.serving import engine_needs
from eks_inference.charts.weights_loaders import loader_of
from eks_inference.constructs._stacks import (
    outermost_stack,
    record_construct,
    region_of,
    stack_of,
)
from eks_inference.constructs.addons import InferenceObservability, PlatformAddons, require
from eks_inference.constructs.applied_objects import AppliedObjects
from eks_inference.constructs.cluster import InferenceCluster, PodIdentity
from eks_inference.constructs.lustre import ModelFileSystem
from eks_inference.constructs.model_bucket import ModelBucket
from eks_inference.serve.image import (
    NEURON_RAY_IMAGE,
    NEURON_RAY_IMAGE_CONTEXT,
    neuron_ray_build_args,
    neuron_ray_image_hash,
)
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import Placement
from eks_inference.specification.routes import Route


class NeuronRayImage(Construct):
    """The Ray + Neuron vLLM image (``eks_inference/serve/image``), one per deployed stack.

    Registered with the stack's synthesizer under the source hash
    :func:`~eks_inference.serve.image.neuron_ray_image_hash`, which is also the image tag, so
    the URI CloudFormation resolves is the one :func:`~eks_inference.serve.image.asset_image_uri`
    writes into ``k8s_manifests/``. Synth copies the build context (a Dockerfile) into the
    cloud assembly, so ``cdk.out`` deploys on its own; the CDK CLI builds and pushes the image
    at deploy time. Use :meth:`of`: every Neuron RayService of a stack, including those in its
    nested stacks, shares the one image, which is built once.
    """

    _ID = "NeuronRayImage"

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        stack = stack_of(scope)
        source_hash = neuron_ray_image_hash()
        # Staged like DockerImageAsset stages its context, but under our own hash: the
        # manifests must know the tag without synthesizing, which DockerImageAsset's
        # fingerprint does not allow.
        staging = AssetStaging(
            self,
            "Context",
            source_path=str(NEURON_RAY_IMAGE_CONTEXT),
            asset_hash=source_hash,
            asset_hash_type=AssetHashType.CUSTOM,
        )
        location = stack.synthesizer.add_docker_image_asset(
            source_hash=source_hash,
            directory_name=staging.relative_staged_path(stack),
            docker_build_args=neuron_ray_build_args(),
        )
        self.image_uri: str = location.image_uri

    @classmethod
    def of(cls, scope: IConstruct) -> NeuronRayImage:
        """The image of the deployed (outermost) stack around ``scope``, created on first use."""
        stack = outermost_stack(stack_of(scope))
        image = _IMAGES.get(stack)
        if image is None:
            existing = stack.node.try_find_child(cls._ID)
            if existing is None:
                image = cls(stack, cls._ID)
            elif isinstance(existing, cls):
                image = existing
            else:
                raise TypeError(f"{stack.node.path}/{cls._ID} exists and is not a {cls.__name__}")
            # Every deployment of the stack asks; the tree is searched on the first ask only.
            _IMAGES[stack] = image
        return image


# The construct id of a deployment's one manifest resource.
MANIFEST_ID = "Objects"


class ModelDeployment(Construct):
    """One model server on an :class:`InferenceCluster`: its charts, applied, and its IAM.

    Everything it creates follows from the charts' record of what they need from the platform
    (:class:`~eks_inference.charts.contract.PlatformNeeds`), never from the rendered objects,
    and every provider of those needs is found in ``platform``, the record the cluster's
    add-ons fill (:class:`~eks_inference.constructs.addons.registry.PlatformAddons`). Before
    anything is created, synth fails:

    * naming the add-on to add, when a need has no provider (a RayService without KubeRay,
      an Ingress without the Load Balancer Controller, a Secret, a Mountpoint volume, a
      pool no add-on launches nodes for): :func:`~eks_inference.constructs.addons.require`;
    * with the pod's field path, when a pod fits no node of the pool it is placed on, or fits
      a node of another pool (:meth:`PlatformAddons.check_schedulable`), so an app built
      from the constructs is checked as the reference stack is.

    Then it creates:

    * one ``Custom::AWSCDK-EKS-KubernetesResource`` (:attr:`manifest`) holding every object
      of the charts of :func:`~eks_inference.charts.deployment.deployment_charts`
      (NetworkPolicies, Mountpoint volumes, then the engine's server: the vLLM Deployment or
      the RayService) and, with ``neuron.run_compile_job``, of
      :func:`~eks_inference.charts.deployment.compile_job_charts` (the Neuron compile Job),
      then of :func:`~eks_inference.charts.deployment.observability_charts` (PodMonitors,
      alert rules and the dashboard, when the platform has ``InferenceObservability``; the
      KEDA ScaledObject of an autoscaled standalone vLLM), then the Ingress, in that order
      (:attr:`charts`): what an object refers to comes before it. One resource is one run of
      the kubectl handler on create, update and delete, where one per chart was four to six
      run one after another, and a deployment's objects are deleted together. It is applied
      after everything any of its objects needs: the namespaces they use; the Mountpoint
      driver and its role's policy when they mount volumes; the add-ons that install their
      custom resources (KubeRay for a RayService, kube-prometheus-stack for monitors, KEDA);
      the Pod Identity association (and the role) of every identity its pods use, since the
      Pod Identity webhook gives credentials only to pods created after the association;
    * one IAM role per identity the charts' pods need, given through Pod Identity to exactly
      that service account and granted exactly the prefixes recorded: for
      ``loader: runai_streamer`` the servers read the weights prefix
      (:attr:`server_identity`); on Inferentia2 with a compiled-artifacts prefix the compile
      job's service account may write this deployment's artifact key and do nothing else
      (:attr:`compile_identity`). It is the only principal of the deployment that can write
      there, so serving never modifies the artifacts it loads, and it exists whether or not
      the Job is applied here, since ``k8s_manifests/`` holds the Job for running by hand.
      Deployments that compile the same graph share a key, and each one's compile role can
      write it;
    * for ``loader: fsx``, its FSx for Lustre file system (:attr:`file_system`,
      :class:`~eks_inference.constructs.lustre.ModelFileSystem`: created in the pool's zone
      and linked to the weights prefix, or imported); the volume is applied after it and the
      platform's FSx CSI driver;
    * read access for the cluster's Mountpoint driver to exactly the prefixes the volumes
      mount (:attr:`mountpoint_prefixes`). The driver's role lives with the add-ons; the
      serving pods of a Mountpoint deployment get no AWS credentials at all;
    * when the engine runs it (a Neuron RayService): the Ray + Neuron image
      (:class:`NeuronRayImage`, once per stack);
    * with a ``route`` (the deployment is exposed, e.g. ``platform.route(spec)``): the server
      configured for the load balancer and, last, its Ingress
      (:func:`~eks_inference.charts.deployment.endpoint_charts`), applied after the AWS Load
      Balancer Controller (the platform's controller of its IngressClass), which must outlive it to
      delete the load balancer; servers that require the API key are applied after the
      objects that sync it (the platform's maker of that Secret, ``ApiKeys``), since their
      pods do not start without it.

    Charts are rendered as plain records (:class:`~eks_inference.charts.record.ChartRecord`,
    no cdk8s app) with the bucket's name and a literal ``region``: the Mountpoint mount
    options and the Run:ai streamer's environment take it verbatim. ``region`` defaults to the
    stack's region, which must then be concrete.

    The manifests are created in this construct's scope, not under the cluster as
    ``cluster.add_cdk8s_chart`` would do (which is otherwise what this is:
    ``KubernetesManifest(manifest=chart.to_json())``), so that a deployment placed in a
    ``NestedStack`` keeps its manifests, roles and associations in that nested stack. CDK turns
    the references to the cluster, its kubectl provider and the bucket into nested-stack
    parameters and every dependency on a resource of the parent (kubectl readiness, namespace,
    add-ons, Pod Identity agent) into a ``DependsOn`` of the nested stack's resource. The one
    grant that lands in the parent is the Mountpoint driver's, whose role is shared.

    Attributes: :attr:`charts` (in the order their objects are applied), :attr:`manifest`,
    :attr:`needs` (of every chart rendered, the compile job's included),
    :attr:`server_identity`, :attr:`compile_identity`, :attr:`mountpoint_prefixes`,
    :attr:`neuron_ray_image` and :attr:`region`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        platform: PlatformAddons,
        bucket: ModelBucket,
        spec: ModelDeploymentSpec,
        placement: Placement,
        region: str | None = None,
        route: Route | None = None,
        retain_chart_manifests: bool = False,
    ) -> None:
        """Render, apply and authorize ``spec``.

        :param platform: the cluster and what its add-ons provide (e.g.
            ``InferenceAddons(...).platform``, with the optional add-ons registered too); the
            deployment's manifests are applied after the providers of what they need, and
            synth fails naming the add-on when there is none.
        :param bucket: the model bucket holding the weights and compiled artifacts.
        :param spec: the deployment.
        :param placement: the node pools of its workers and (Ray) head; they must be pools of
            the platform's cluster, e.g. ``PlatformSpec.placement(spec)``.
        :param region: the bucket's region, written into the pods' configuration; default:
            the stack's region, which must then be known at synth time.
        :param route: where the deployment is reached on the platform's load balancer
            (``PlatformSpec.route(spec)``); its Ingress needs a ``LoadBalancerController``
            and, when it requires the API key, ``ApiKeys``; default: in-cluster only.
        :param retain_chart_manifests: the first of the two deploys that move a deployment
            applied by an earlier release (one manifest resource per chart) to one manifest
            resource without deleting its objects: keep the per-chart resources, unchanged
            but retained, beside the one that now applies the objects; the next deploy without
            it drops them, and CloudFormation leaves their objects alone (docs: upgrading).
            Default: off.
        """
        super().__init__(scope, construct_id)
        cluster = platform.cluster
        for pool in (placement.workers, placement.head):
            if cluster.node_pool(pool.name) != pool:
                raise ValueError(
                    f"deployment {spec.name!r} is placed on pool {pool.name!r}, which differs "
                    "from the cluster's pool of that name; use the platform's placement"
                )
        if route is not None and route.deployment != spec.name:
            raise ValueError(f"route of deployment {route.deployment!r} given for {spec.name!r}")
        self.spec = spec
        self.placement = placement
        self.route = route
        # This construct's stack is its scope's, asked of Node.js once if at all.
        record_construct(self, scope)
        stack = stack_of(self)
        self.region = _literal_region(stack, region)
        self.neuron_ray_image: str | None = (
            NeuronRayImage.of(stack).image_uri
            if NEURON_RAY_IMAGE in engine_needs(spec).images
            else None
        )
        self.file_system: ModelFileSystem | None = None
        if loader_of(spec).volume_kind == "lustre":
            self.file_system = ModelFileSystem(
                self,
                "FileSystem",
                cluster=cluster,
                bucket=bucket,
                spec=spec,
                placement=placement,
                region=self.region,
            )
        context = RenderContext(
            bucket_name=bucket.bucket_name,
            region=self.region,
            # Only Neuron RayService pods run the built image; the charts read this field for
            # nothing else, so other deployments leave it empty rather than register an image
            # that nothing would pull.
            neuron_ray_image=self.neuron_ray_image or "",
            vpc_cidr=cluster.vpc_cidr,
            file_systems=(
                ((spec.name, self.file_system.mount),) if self.file_system is not None else ()
            ),
        )
        rendered = deployment_charts(spec, placement, context, route)
        serving = rendered.charts
        compile_job = compile_job_charts(rendered)
        observed = self._observability(spec, platform, observability_charts(rendered))
        exposed = endpoint_charts(rendered)
        # After the volumes it mounts; serving pods wait for its completion marker. Monitors
        # and the autoscaler come after the pods they watch and the Deployment they scale, the
        # Ingress last, once there is a server to route to.
        self.charts: list[ChartRecord] = (
            serving
            + (compile_job if spec.neuron_options.run_compile_job else [])
            + observed
            + exposed
        )
        self.needs = needs_of(serving + compile_job + observed + exposed)
        require(platform, self.needs, deployment=spec.name)
        shared = platform.object_owners.claim(
            spec.name, (obj for chart in self.charts for obj in chart.objects)
        )
        if shared is not None:
            raise ValueError(shared)
        # A pod no node of its pool can run would be Pending forever: refuse to apply it.
        platform.check_schedulable(self.needs, deployment=spec.name)
        mountpoint = platform.mountpoint

        identities = {
            need.name: self._add_identity(cluster, bucket, need)
            for need in self.needs.service_accounts
        }
        self.server_identity = identities.get(names.service_account_name(spec.name))
        self.compile_identity = identities.get(names.compile_service_account_name(spec.name))

        self.mountpoint_prefixes: tuple[str, ...] = ()
        # Everything the objects wait for, in the order first needed, each once: the namespaces
        # they use (require() made sure something creates each), the providers of their
        # volumes, custom resources, identities, Secrets and IngressClasses.
        # (By Python identity: a construct's path would be one more call into Node.js.)
        dependencies: dict[int, IConstruct] = {}

        def after(*constructs: IConstruct) -> None:
            for construct in constructs:
                dependencies.setdefault(id(construct), construct)

        for chart in self.charts:
            needs = chart.needs
            after(*(m for n in needs.namespaces if (m := platform.namespace(n)) is not None))
            # require() made sure the platform has a driver when a chart mounts volumes.
            if needs.mounted_prefixes and mountpoint is not None:
                for prefix in _mounted_prefixes(chart.role, needs.mounted_prefixes):
                    mountpoint.grant_read(prefix)
                    self.mountpoint_prefixes += (prefix,)
                # The driver must exist, and be able to read, before a volume is mounted.
                after(*mountpoint.dependencies)
            # require() made sure the platform has the FSx CSI driver for FSx volumes.
            if needs.lustre_volumes and platform.lustre is not None:
                after(platform.lustre)
                if self.file_system is not None:
                    after(*self.file_system.dependencies)
            after(*(platform.crd_installers[crd] for crd in needs.custom_resources))
            for account in needs.service_accounts:
                identity = identities[account.name]
                after(identity.association, identity.role)
            after(*(platform.secret_makers[secret] for secret in needs.secrets))
            after(*(platform.ingress_controllers[c] for c in needs.ingress_classes))
        # One manifest resource, one kubectl run, for every object of the deployment, in the
        # charts' order: what an object refers to is applied before it. The chart's objects
        # themselves, not to_json()'s deep copy: they are only read, to serialize them.
        # ``overwrite`` applies on create too (``kubectl apply``, not ``create``),
        # so that a deployment's objects are adopted where they already exist, as they do
        # after the per-chart resources of an earlier release are retained (docs: upgrading).
        self.manifest = AppliedObjects(
            self,
            MANIFEST_ID,
            cluster=cluster,
            objects=(o for chart in self.charts for o in chart.objects),
            overwrite=True,
            after=dependencies.values(),
        )
        if retain_chart_manifests:
            self._retain_chart_manifests(cluster)

    def _retain_chart_manifests(self, cluster: InferenceCluster) -> None:
        """The per-chart manifest resources of earlier releases, under the ids and with the
        properties they had (so CloudFormation updates nothing of them and runs no kubectl),
        retained: removed by a later deploy, they are forgotten, not deleted with their
        objects, which the deployment's one manifest resource has adopted by then."""
        for chart in self.charts:
            legacy = eks.KubernetesManifest(
                self, chart.role, cluster=cluster.eks_cluster, manifest=list(chart.objects)
            )
            resource = cast(CustomResource, legacy.node.find_child("Resource"))
            resource.apply_removal_policy(RemovalPolicy.RETAIN)

    @staticmethod
    def _observability(
        spec: ModelDeploymentSpec, platform: PlatformAddons, charts: list[ChartRecord]
    ) -> list[ChartRecord]:
        """The monitoring and autoscaling charts the platform can apply.

        Monitors, rules and the dashboard are applied when an add-on of the platform installs
        the Prometheus Operator's CRDs (``InferenceObservability``); without it the deployment
        is served but not scraped. A ScaledObject cannot be left out that way: an autoscaled
        Deployment has no replica count of its own, so without KEDA it would never grow.
        """
        kept = []
        for chart in charts:
            if platform.installs(chart.needs.custom_resources):
                kept.append(chart)
            elif chart.role == AUTOSCALING_ROLE:
                observability = InferenceObservability
                raise ValueError(
                    f"deployment {spec.name!r}: scaling.autoscale needs KEDA and Prometheus; "
                    f"add {observability.__name__} ({observability.__module__}."
                    f"{observability.__qualname__}) to the platform before the deployment, or "
                    "set scaling.autoscale: false"
                )
        return kept

    def _add_identity(
        self, cluster: InferenceCluster, bucket: ModelBucket, need: ServiceAccountNeed
    ) -> PodIdentity:
        """A Pod Identity role for ``need``'s service account, granted exactly its prefixes."""
        identity = cluster.add_pod_identity(
            need.role.title(),
            namespace=need.namespace,
            service_account=need.name,
            description=(
                f"{need.pods} of {self.spec.name} on EKS cluster {cluster.cluster_name}: "
                f"{need.purpose}"
            ),
            scope=self,
        )
        for prefix in need.reads:
            bucket.grant_read_prefix(identity.role, prefix)
        for prefix in need.writes:
            bucket.grant_write_prefix(identity.role, prefix)
        return identity


def _literal_region(stack: Stack, region: str | None) -> str:
    """``region``, or ``stack``'s; a literal string that agrees with a concrete stack region."""
    stack_region = region_of(stack)
    known = not _is_unresolved(stack_region)
    if region is None:
        if not known:
            raise ValueError(
                "ModelDeployment needs a literal region (Mountpoint mount options and the "
                "Run:ai streamer take it verbatim): pass region=, or give the stack an env"
            )
        return stack_region
    if _is_unresolved(region):
        raise ValueError("region must be a literal string such as 'us-east-1', not a token")
    if known and region != stack_region:
        raise ValueError(
            f"region {region!r} differs from the stack's region {stack_region!r}, where the "
            "model bucket is"
        )
    return region


# The image of each deployed stack, by stack (see NeuronRayImage.of).
_IMAGES: WeakKeyDictionary[Stack, NeuronRayImage] = WeakKeyDictionary()


@cache
def _is_unresolved(value: str) -> bool:
    """``Token.is_unresolved`` of a string, which depends on nothing but its text."""
    return Token.is_unresolved(value)


def _mounted_prefixes(chart: str, volumes: Iterable[MountedPrefix]) -> tuple[str, ...]:
    """Bucket prefixes the Mountpoint volumes of ``chart`` mount, all of them read-only."""
    writable = [v.prefix for v in volumes if not v.read_only]
    if writable:
        raise ValueError(
            f"chart {chart} mounts {writable} read-write; the Mountpoint driver is only ever "
            "given read access, so writers upload with their own identity"
        )
    return tuple(v.prefix for v in volumes)
