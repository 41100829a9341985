"""``InferenceStack``: the cluster, its add-ons, the model bucket and every model deployment.

Each deployment is a :class:`DeploymentStack` (a CloudFormation nested stack) inside the one
stack that ``cdk deploy InferenceStack`` deploys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import CfnOutput, Duration, Environment, Fn, NestedStack, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from eks_inference.charts.contract import PlatformNeeds
from eks_inference.charts.serving import engine_needs
from eks_inference.charts.traffic_split import traffic_split_chart
from eks_inference.charts.weights_loaders import loader_of
from eks_inference.constructs import (
    ApiKeys,
    DynamoPlatform,
    FsxCsiDriver,
    InferenceAddons,
    InferenceCluster,
    InferenceObservability,
    KarpenterNodeProvisioning,
    KServe,
    LeaderWorkerSet,
    LoadBalancerController,
    ModelBucket,
    ModelDeployment,
    PlatformAddons,
)
from eks_inference.constructs._stacks import record_nested_stack
from eks_inference.constructs.addons.inference_extension import InferenceExtension
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.platform import Placement, PlatformSpec
from eks_inference.specification.routes import Route, api_key_secret_name, base_url_outputs
from eks_inference.specification.routing_rules import picks_endpoints

# Where the controller writes the load balancer's DNS name on an Ingress it serves; it appears
# a minute or two after the Ingress, once the load balancer exists.
_LOAD_BALANCER_HOST_PATH = ".status.loadBalancer.ingress[0].hostname"
_LOAD_BALANCER_HOST_TIMEOUT = Duration.minutes(10)


class DeploymentStack(NestedStack):
    """The nested stack of one model deployment: its manifests, roles and associations.

    A deployment adds one manifest custom resource (all its objects), IAM roles and policies and
    Pod Identity associations, and a Neuron RayService manifest alone is about 60 KB of template.
    In one stack, CloudFormation's limit of a 1 MB template (and 500 resources) would cap a
    platform at a few dozen deployments, and at about 15 Neuron RayServices. Here the parent
    grows by one resource per deployment (the ``AWS::CloudFormation::Stack``) and each nested
    template holds one deployment.

    What crosses the boundary: the cluster name, the kubectl provider's service token and the
    bucket's name and ARN arrive as nested-stack parameters, which CDK creates from the
    references; dependencies on resources of the parent (kubectl readiness, the namespace, the
    KubeRay operator, the Mountpoint add-on and its role, the Pod Identity agent) become
    ``DependsOn`` of this stack's resource in the parent, so the whole deployment waits for
    them and is deleted before them. The Mountpoint driver's read grant is the one change made
    in the parent, since its role is shared by every volume of the cluster. Least privilege
    stays per deployment: each nested stack holds its own roles, granted its own prefixes.

    That shared role is what limits scale first: every distinct prefix mounted adds two
    statements to it, and beyond its 10,240-character inline policy CDK moves statements into
    managed policies, of which IAM attaches 10 to a role by default (20 with a quota
    increase). With a new weights prefix for three deployments in four, that is reached at
    about 200 deployments, before any template limit (CDK warns at synth when it is).
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
        region: str,
        route: Route | None = None,
        retain_chart_manifests: bool = False,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description=f"Model deployment {spec.name} ({spec.model.id} on {spec.instance_type})",
        )
        # Its parent and region are then known without a round trip per deployment.
        record_nested_stack(self, scope)
        self.deployment = ModelDeployment(
            self,
            "Deployment",
            platform=platform,
            bucket=bucket,
            spec=spec,
            placement=placement,
            region=region,
            route=route,
            retain_chart_manifests=retain_chart_manifests,
        )


class InferenceStack(Stack):
    """Everything a :class:`PlatformSpec` describes: one stack, one nested stack per deployment.

    Creates the :class:`ModelBucket` (named ``platform.model_bucket_name``, so the manifests
    in ``k8s_manifests/`` and the template agree), the :class:`InferenceCluster` with one
    node group per pool, its :class:`InferenceAddons` and :class:`InferenceObservability`
    (metrics, dashboards, alerts, KEDA), :class:`KServe` (:attr:`kserve`) when a deployment's
    engine serves InferenceServices (``engine: kserve``), :class:`DynamoPlatform`
    (:attr:`dynamo`) when one serves DynamoGraphDeployments (``engine: dynamo``),
    :class:`InferenceExtension` (:attr:`inference_extension`, the InferencePool CRD) when a
    deployment routes through an endpoint picker (``routing``), and for every deployment a
    :class:`DeploymentStack` holding its :class:`ModelDeployment` (:attr:`deployments`). The
    stack composes them: every add-on registers what it provides with one
    :class:`PlatformAddons` (:attr:`platform_addons`), which each deployment is handed and
    checks its needs against. The Mountpoint driver is given
    read access to exactly the prefixes the deployments' Mountpoint volumes mount
    (:attr:`mountpoint_prefixes`); pods are configured with ``platform.region``.

    With ``platform.endpoint`` it also creates the :class:`LoadBalancerController` and, when the
    endpoint requires API keys, :class:`ApiKeys`, hands each exposed deployment its route, and
    prints every exposed deployment's OpenAI base URL (``BaseUrl...`` outputs: from its host
    name, or else from the load balancer's DNS name, read from the first Ingress once the
    controller has created the load balancer) and the command that prints the API key.

    With ``platform.node_provisioning: karpenter`` only the system pool is a managed node
    group, the Cluster Autoscaler is not installed, and :class:`KarpenterNodeProvisioning`
    (:attr:`karpenter`) provisions every other pool's nodes. In either mode every pod a
    deployment renders must fit a node of its own pool and of no other, or its
    :class:`ModelDeployment` fails synth with the pod's field path.

    ``cdk destroy`` deletes every object a controller turns into AWS resources (the
    Ingresses, Karpenter's NodePools, Prometheus' claim) before that controller, the system
    node group it runs on and the cluster, so that each controller deletes what it made; the
    model bucket stays (see the documentation's "Tearing down" page).

    The stack is environment-agnostic unless ``env`` is given; with an explicit region pass
    ``availability_zones`` too, so that no availability-zone lookup is needed at synth.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        platform: PlatformSpec,
        env: Environment | None = None,
        vpc: ec2.IVpc | None = None,
        availability_zones: Sequence[str] | None = None,
        admin_role_arn: str | None = None,
        public_access_cidrs: Sequence[str] | None = None,
        description: str | None = None,
        retain_chart_manifests: bool = False,
    ) -> None:
        """Build the stack.

        :param platform: node pools, bucket name, Kubernetes version and deployments.
        :param env: account and region; default: environment-agnostic.
        :param vpc: an existing VPC for the cluster; default: a new one.
        :param availability_zones: zones of a new VPC (required in effect with ``env``).
        :param admin_role_arn: IAM role given cluster-admin through an access entry.
        :param public_access_cidrs: CIDRs allowed to reach a public API endpoint; default:
            none, the endpoint is private.
        :param description: CloudFormation stack description.
        :param retain_chart_manifests: the first deploy of a platform that an earlier release
            deployed with one manifest resource per chart
            (:class:`~eks_inference.constructs.ModelDeployment`'s ``retain_chart_manifests``);
            default: off.
        """
        super().__init__(
            scope,
            construct_id,
            env=env,
            description=description
            or f"EKS inference platform {platform.cluster_name}: cluster, add-ons, model bucket",
        )
        self._zones = list(availability_zones) if availability_zones else None
        self.platform = platform
        self.model_bucket = ModelBucket(self, "ModelBucket", bucket_name=platform.model_bucket_name)
        self.cluster = InferenceCluster(
            self,
            "Inference",
            cluster_name=platform.cluster_name,
            node_pools=platform.node_pools,
            kubernetes_version=platform.kubernetes_version,
            vpc=vpc,
            availability_zones=availability_zones,
            admin_role_arn=admin_role_arn,
            public_access_cidrs=public_access_cidrs,
            node_provisioning=platform.node_provisioning,
        )
        # In the cluster's scope, so the add-ons' resources are named as the cluster's own.
        self.addons = InferenceAddons(
            self.cluster, "Addons", cluster=self.cluster, model_bucket=self.model_bucket
        )
        self.platform_addons = self.addons.platform
        """What the add-ons provide, the record every deployment is handed."""
        # Every add-on below registers with the record before the deployments read it.
        self.karpenter: KarpenterNodeProvisioning | None = None
        if platform.node_provisioning.uses_karpenter:
            self.karpenter = KarpenterNodeProvisioning(
                self.cluster,
                "Karpenter",
                platform=self.platform_addons,
                deployments=platform.deployments,
            )
        self.fsx_csi: FsxCsiDriver | None = None
        if any(loader_of(d).volume_kind == "lustre" for d in platform.deployments):
            self.fsx_csi = FsxCsiDriver(self.cluster, "FsxCsi", platform=self.platform_addons)
        self.observability = InferenceObservability(
            self.cluster, "Observability", platform=self.platform_addons
        )
        # KServe, Knative and cert-manager only when a deployment's engine needs them.
        needed = set(
            PlatformNeeds.combined(
                engine_needs(spec) for spec in platform.deployments
            ).custom_resources
        )
        self.kserve: KServe | None = (
            KServe(self.cluster, "KServe", platform=self.platform_addons)
            if needed & set(KServe.PROVIDES.crds)
            else None
        )
        # The Dynamo operator, its CRDs and NATS only when a deployment's engine needs them.
        self.dynamo: DynamoPlatform | None = (
            DynamoPlatform(self.cluster, "DynamoPlatform", platform=self.platform_addons)
            if needed & set(DynamoPlatform.PROVIDES.crds)
            else None
        )
        # The InferencePool CRD only when a deployment routes through an endpoint picker.
        self.inference_extension: InferenceExtension | None = (
            InferenceExtension(self.cluster, "InferenceExtension", platform=self.platform_addons)
            if any(picks_endpoints(spec) for spec in platform.deployments)
            else None
        )
        # The LeaderWorkerSet controller only when a deployment serves across nodes.
        self.leader_worker_set: LeaderWorkerSet | None = (
            LeaderWorkerSet(self.cluster, "LeaderWorkerSet", platform=self.platform_addons)
            if needed & set(LeaderWorkerSet.PROVIDES.crds)
            else None
        )
        self.load_balancer_controller: LoadBalancerController | None = None
        self.api_keys: ApiKeys | None = None
        if platform.endpoint is not None:
            self.load_balancer_controller = LoadBalancerController(
                self.cluster, "LoadBalancerController", platform=self.platform_addons
            )
            if platform.endpoint.authentication == "api_key":
                self.api_keys = ApiKeys(self.cluster, "ApiKeys", platform=self.platform_addons)
        routes = platform.routes()
        stacks = {
            spec.name: DeploymentStack(
                self,
                f"Deployment-{spec.name}",
                platform=self.platform_addons,
                bucket=self.model_bucket,
                spec=spec,
                placement=platform.placement(spec),
                region=platform.region,
                route=routes.get(spec.name),
                retain_chart_manifests=retain_chart_manifests,
            )
            for spec in platform.deployments
        }
        self.deployments: dict[str, ModelDeployment] = {
            name: stack.deployment for name, stack in stacks.items()
        }
        if self.karpenter is not None:
            # Deleted before the NodePools, so Karpenter terminates empty nodes.
            for deployment_stack in stacks.values():
                deployment_stack.node.add_dependency(self.karpenter.node_pools)
        self._traffic_splits(platform, stacks)
        self._endpoint_outputs(platform, routes, stacks)
        self.mountpoint_prefixes: tuple[str, ...] = tuple(
            sorted({p for d in self.deployments.values() for p in d.mountpoint_prefixes})
        )
        """Bucket prefixes the Mountpoint driver may read: those the deployments' volumes mount."""

    def _traffic_splits(self, platform: PlatformSpec, stacks: Mapping[str, NestedStack]) -> None:
        """The Ingresses of the endpoint's traffic splits, after the deployments they route to.

        Their target groups are the targets' Services, which the controller must find when it
        reconciles the group; the targets' stacks already wait for the controller.
        """
        splits = platform.splits()
        if not splits:
            return
        deployments = {spec.name: spec for spec in platform.deployments}
        chart = traffic_split_chart(splits, deployments, self.cluster.vpc_cidr)
        manifest = eks.KubernetesManifest(
            self, "TrafficSplits", cluster=self.cluster.eks_cluster, manifest=chart.to_json()
        )
        for split in splits:
            for route, _ in split.targets:
                manifest.node.add_dependency(stacks[route.deployment])

    def _endpoint_outputs(
        self, platform: PlatformSpec, routes: Mapping[str, Route], stacks: Mapping[str, NestedStack]
    ) -> None:
        """The base-URL outputs (:func:`~eks_inference.specification.routes.base_url_outputs`: one
        per
        route and per split), and ``ApiKeyCommand`` with a key."""
        if not routes:
            return
        scope = Construct(self, "Endpoints")
        outputs = base_url_outputs(routes, platform.splits())
        load_balancer_host: str | None = None
        if any(output.route.host is None for output in outputs):
            # Every Ingress of the group names the same load balancer: read it from one.
            name = next(
                (n for n, route in routes.items() if route.host is None), next(iter(routes))
            )
            lookup = eks.KubernetesObjectValue(
                scope,
                "LoadBalancerHost",
                cluster=self.cluster.eks_cluster,
                object_type="ingress",
                object_name=name,
                object_namespace=INFERENCE_NAMESPACE,
                json_path=_LOAD_BALANCER_HOST_PATH,
                timeout=_LOAD_BALANCER_HOST_TIMEOUT,
            )
            lookup.node.add_dependency(stacks[name])
            load_balancer_host = lookup.value
        for output in outputs:
            CfnOutput(
                scope,
                output.output_id,
                value=output.route.base_url(load_balancer_host),
                description=output.description,
            )
        if self.api_keys is not None:
            CfnOutput(
                scope,
                "ApiKeyCommand",
                value=Fn.join(
                    " ",
                    [
                        "aws secretsmanager get-secret-value --secret-id",
                        api_key_secret_name(platform.cluster_name),
                        "--query SecretString --output text --region",
                        self.region,
                    ],
                ),
                description="Prints the API key the endpoints require (Authorization: Bearer)",
            )

    @property
    def availability_zones(self) -> list[str]:
        """The given zones; otherwise CDK's (which, in a stack with a region, is a lookup).

        ``ec2.Vpc`` reads this even when it is given explicit zones, and in a stack with a
        fixed environment the default implementation records a context lookup that the CDK
        CLI would resolve with AWS credentials.
        """
        if self._zones is not None:
            return list(self._zones)
        zones: list[str] = super().availability_zones
        return zones
