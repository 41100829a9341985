"""``InferenceCluster``: an EKS cluster with one managed node group per node pool.

The cluster is a native ``AWS::EKS::Cluster`` (``aws_eks_v2``) with a kubectl provider, so
Helm charts, manifests and cdk8s charts can be applied to it from CDK. Nothing is looked up
while it is built: availability zones are either given or left to CloudFormation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from aws_cdk import CfnOutput, Fn, Stack, Tags, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from eks_inference import versions
from eks_inference.charts.namespace import namespace_chart
from eks_inference.constructs._nag import (
    acknowledge,
    acknowledge_managed_policies,
    managed_policy_finding,
    wildcard_resource_finding,
)
from eks_inference.constructs._stacks import record_construct
from eks_inference.constructs.eks_addon import AddonRole, EksAddon
from eks_inference.constructs.kubectl_layer import kubectl_layer, kubernetes_release
from eks_inference.constructs.nodegroups import PoolNodegroup
from eks_inference.names import INFERENCE_NAMESPACE, VPC_CIDR
from eks_inference.specification.aws_types import iam_role_arn_problem, public_access_cidr_problem
from eks_inference.specification.node_pools import (
    NodePool,
    managed_node_group_problems,
    system_pool_of,
)
from eks_inference.specification.provisioning import NodeProvisioning

# The VPC CNI's policy is not among them: the CNI gets it through Pod Identity, so that no
# pod on a node holds the permission to rewire the VPC's network interfaces.
NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryReadOnly",
)
_VPC_CNI_POLICY = "AmazonEKS_CNI_Policy"
_VPC_CNI_SERVICE_ACCOUNT = "aws-node"
# The CNI's network policy agent enforces the charts' NetworkPolicies (without it the API
# server stores them and nothing applies them). The add-on's schema takes a string.
_VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}
_PRIVATE_SUBNET_CIDR_MASK = 18
_PUBLIC_SUBNET_CIDR_MASK = 24
# Subnet tags the AWS Load Balancer Controller discovers subnets by.
PUBLIC_LOAD_BALANCER_SUBNET_TAG = "kubernetes.io/role/elb"
INTERNAL_LOAD_BALANCER_SUBNET_TAG = "kubernetes.io/role/internal-elb"


@dataclass(frozen=True)
class PodIdentity:
    """An IAM role and the Pod Identity association that gives it to one service account."""

    role: iam.Role
    association: eks.CfnPodIdentityAssociation


def pod_identity_principal(*, account: str, cluster_arn: str) -> iam.IPrincipal:
    """The principal a Pod Identity role trusts: EKS Pod Identity acting for one cluster.

    ``pods.eks.amazonaws.com`` with ``sts:TagSession``, on the conditions that the request
    comes from ``account`` (``aws:SourceAccount``) and carries the session tag
    ``eks-cluster-arn`` of the cluster ``cluster_arn`` (``aws:RequestTag/eks-cluster-arn``).
    Without them the service principal is the same for every cluster of every account, so
    any cluster whose operator may pass the role could have its pods assume it. The cluster
    is named by the session tag Pod Identity attaches to every ``AssumeRole`` it makes (the
    EKS user guide's trust-policy page restricts clusters, namespaces and service accounts
    this way; the associations keep session tags on, their default), not by
    ``aws:SourceArn``, for which EKS documents no value. Every Pod Identity role of the
    platform trusts this principal.
    """
    return iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")).with_conditions(
        {
            "StringEquals": {
                "aws:SourceAccount": account,
                "aws:RequestTag/eks-cluster-arn": cluster_arn,
            },
        }
    )


class InferenceCluster(Construct):
    """An EKS cluster for model serving, with one managed node group per :class:`NodePool`.

    Creates:

    * a VPC across ``max_azs`` availability zones (or uses ``vpc``), nodes in private subnets,
      one NAT gateway per zone (image pulls of tens of GB stay in their zone) and an S3
      gateway endpoint, so model weights are read from S3 without NAT charges; its public and
      private subnets are tagged for the AWS Load Balancer Controller's subnet discovery
      (``kubernetes.io/role/elb``, ``kubernetes.io/role/internal-elb``); tag the subnets of
      a ``vpc`` you bring yourself;
    * a native EKS cluster at ``kubernetes_version`` (default 1.35) with all control-plane log
      types enabled, Kubernetes secrets envelope-encrypted by a customer-managed KMS key with
      rotation on, and access only through access entries (no aws-auth ConfigMap);
    * a kubectl provider with the kubectl layer of that version, so Helm charts and manifests
      can be applied (``self.cluster.add_helm_chart`` / ``add_manifest`` / ``add_cdk8s_chart``);
    * the EKS Pod Identity Agent add-on: pods get AWS credentials through Pod Identity
      (:meth:`add_pod_identity`), which needs no OIDC provider and no role annotation;
    * one managed node group per pool (:class:`PoolNodegroup`) sharing one node role; with
      ``NodeProvisioning.KARPENTER`` the system pool's only, the other pools' nodes coming
      from Karpenter;
    * the ``inference`` namespace (the charts' ``namespace_chart``), applied as a manifest
      that deployments depend on (:meth:`namespace`);
    * outputs with the cluster name and the ``aws eks update-kubeconfig`` command.

    The API endpoint is private by default: only the VPC (and what is connected to it, a VPN
    or a bastion) reaches it, and the kubectl provider runs inside the VPC. Pass
    ``public_access_cidrs`` to open a public endpoint to exactly those networks (never
    ``0.0.0.0/0``: see :func:`~eks_inference.specification.aws_types.public_access_cidr_problem`).
    ``admin_role_arn``, the ARN of one IAM role, gets ``AmazonEKSClusterAdminPolicy``; the
    role that deploys the stack gets no implicit cluster access.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        node_pools: Sequence[NodePool],
        kubernetes_version: str = versions.KUBERNETES_VERSION,
        vpc: ec2.IVpc | None = None,
        max_azs: int = 3,
        availability_zones: Sequence[str] | None = None,
        public_access_cidrs: Sequence[str] | None = None,
        admin_role_arn: str | None = None,
        node_provisioning: NodeProvisioning = NodeProvisioning.MANAGED,
    ) -> None:
        """Build the cluster.

        :param cluster_name: EKS cluster name; also part of the Cluster Autoscaler's
            discovery tags, which is why it must be known at synth time.
        :param node_pools: one managed node group is created per pool; the first CPU pool
            runs the system add-ons.
        :param kubernetes_version: Kubernetes minor version; one of
            ``eks_inference.versions.KUBERNETES_RELEASES``.
        :param vpc: an existing VPC whose private subnets (with egress) take the nodes;
            default: a new VPC.
        :param max_azs: zones of a new VPC when ``availability_zones`` is not given; they are
            chosen by CloudFormation (``Fn::GetAZs``) so that synth needs no lookup.
        :param availability_zones: explicit zones of a new VPC; use zones that offer your
            accelerator instance types (EC2 DescribeInstanceTypeOfferings). In a stack with
            a fixed region, also return them from the stack's ``availability_zones``
            (as :class:`~eks_inference.stacks.InferenceStack` does): ``ec2.Vpc`` reads it,
            and CDK's default turns that into a context lookup.
        :param public_access_cidrs: CIDRs allowed to reach a public endpoint; default: none,
            the endpoint is private.
        :param admin_role_arn: IAM role given cluster-admin through an access entry.
        :param node_provisioning: ``NodeProvisioning.MANAGED`` (default): a managed node
            group per pool, for the Cluster Autoscaler; ``NodeProvisioning.KARPENTER``: a
            managed node group for the system pool only, which runs Karpenter; the other
            pools' nodes come from Karpenter
            (:class:`~eks_inference.constructs.addons.karpenter.KarpenterNodeProvisioning`).
        """
        super().__init__(scope, construct_id)
        if not node_pools:
            raise ValueError("InferenceCluster needs at least one node pool")
        if vpc is not None and availability_zones:
            raise ValueError("availability_zones applies to a new VPC only; omit it with vpc")
        # An ARN known only at deploy time (a token) is checked by EKS then.
        if admin_role_arn and not Token.is_unresolved(admin_role_arn):
            problem = iam_role_arn_problem(admin_role_arn, name="admin_role_arn")
            if problem is not None:
                raise ValueError(problem)
        for cidr in public_access_cidrs or ():
            problem = public_access_cidr_problem(cidr, name="public_access_cidrs entry")
            if problem is not None:
                raise ValueError(problem)
        self.cluster_name = cluster_name
        self.kubernetes_version = kubernetes_version
        self.release = kubernetes_release(kubernetes_version)
        self.node_pools: tuple[NodePool, ...] = tuple(node_pools)
        # A string from an untyped caller is checked here, with the modes it may name.
        self.node_provisioning = NodeProvisioning(node_provisioning)
        managed_pools = self.node_provisioning.managed_pools(self.node_pools)
        for pool in managed_pools:
            for field, problem in managed_node_group_problems(pool).items():
                raise ValueError(f"{field}: {problem}")
        self._pods_principal: iam.IPrincipal | None = None
        self._cluster_name_ref: str | None = None
        self._kubectl_service_token: str | None = None
        self._kubectl_barrier: IConstruct | None = None

        self.vpc = vpc or self._new_vpc(max_azs, availability_zones)
        # Literal for the VPC made here, so manifests that name it need no cross-stack value.
        self.vpc_cidr: str = VPC_CIDR if vpc is None else vpc.vpc_cidr_block
        self.secrets_key = kms.Key(
            self,
            "SecretsKey",
            description=f"Envelope encryption of Kubernetes secrets in EKS cluster {cluster_name}",
            enable_key_rotation=True,
        )
        private_subnets = ec2.SubnetSelection(subnets=self.vpc.private_subnets)
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            version=eks.KubernetesVersion.of(kubernetes_version),
            vpc=self.vpc,
            vpc_subnets=[private_subnets],
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            endpoint_access=(
                eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*public_access_cidrs)
                if public_access_cidrs
                else eks.EndpointAccess.PRIVATE
            ),
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, "KubectlLayer", kubernetes_version),
            ),
            cluster_logging=[
                eks.ClusterLoggingTypes.API,
                eks.ClusterLoggingTypes.AUDIT,
                eks.ClusterLoggingTypes.AUTHENTICATOR,
                eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                eks.ClusterLoggingTypes.SCHEDULER,
            ],
            secrets_encryption_key=self.secrets_key,
            bootstrap_cluster_creator_admin_permissions=False,
            output_config_command=False,
        )
        if admin_role_arn:
            self.cluster.grant_access(
                "AdminAccess",
                admin_role_arn,
                [
                    eks.AccessPolicy.from_access_policy_name(
                        "AmazonEKSClusterAdminPolicy",
                        access_scope_type=eks.AccessScopeType.CLUSTER,
                    )
                ],
            )
        self.pod_identity_agent = EksAddon(
            self,
            "PodIdentityAgent",
            cluster=self,
            addon_name="eks-pod-identity-agent",
            addon_version=versions.EKS_POD_IDENTITY_AGENT_ADDON_VERSION,
        )
        self.vpc_cni = self._add_vpc_cni()
        self.vpc_cni_role = self.vpc_cni.role

        self.node_role = iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"Nodes of the managed node groups of EKS cluster {cluster_name}",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in NODE_POLICIES
            ],
        )
        self._nodegroups: dict[str, PoolNodegroup] = {}
        for pool in managed_pools:
            if pool.name in self._nodegroups:
                raise ValueError(f"node pool name {pool.name!r} is used twice")
            self._nodegroups[pool.name] = PoolNodegroup(
                self,
                f"Pool-{pool.name}",
                cluster=self.eks_cluster,
                cluster_name=cluster_name,
                pool=pool,
                node_role=self.node_role,
                subnets=ec2.SubnetSelection(subnets=self.zone_subnets(pool)),
            )

        # The same chart renders the namespace into k8s_manifests/, so both agree.
        # (what ``add_cdk8s_chart`` would create, at the same path, without a cdk8s app)
        self._namespaces = {
            INFERENCE_NAMESPACE: eks.KubernetesManifest(
                self.cluster,
                "InferenceNamespace",
                cluster=self.eks_cluster,
                manifest=namespace_chart().to_json(),
            )
        }

        stack = Stack.of(self)
        CfnOutput(self, "ClusterName", value=self.cluster.cluster_name)
        CfnOutput(
            self,
            "UpdateKubeconfigCommand",
            value=Fn.join(
                " ",
                [
                    "aws eks update-kubeconfig --name",
                    self.cluster.cluster_name,
                    "--region",
                    stack.region,
                ],
            ),
        )
        self._acknowledge_findings(public=bool(public_access_cidrs))

    def _add_vpc_cni(self) -> EksAddon:
        """The VPC CNI as a managed add-on, its AWS permissions given through Pod Identity.

        EKS installs the CNI itself, reading the node role; managed here (taking over that
        installation, ``resolveConflicts: OVERWRITE``), its ``aws-node`` service account gets
        a role of its own with ``AmazonEKS_CNI_Policy``, and the node role goes without it.
        ``aws-node`` runs on the host network, where the Pod Identity agent serves it. Its
        network policy agent is enabled (``enableNetworkPolicy``), so the NetworkPolicies of
        :mod:`eks_inference.charts.network_policy` are enforced.
        """
        addon = EksAddon(
            self,
            "VpcCni",
            cluster=self,
            addon_name="vpc-cni",
            addon_version=versions.VPC_CNI_ADDON_VERSION,
            role=AddonRole(
                "VpcCniRole",
                _VPC_CNI_SERVICE_ACCOUNT,
                description=f"VPC CNI (aws-node) of EKS cluster {self.cluster_name}",
                managed_policy=_VPC_CNI_POLICY,
            ),
            overwrite=True,
            configuration_values=_VPC_CNI_CONFIGURATION,
        )
        acknowledge(
            addon.role,
            managed_policy_finding(_VPC_CNI_POLICY),
            "The AWS managed policy the VPC CNI needs to manage pod network interfaces; AWS "
            "keeps it current with the CNI. It is held by the CNI's own service account only.",
        )
        return addon

    @property
    def eks_cluster(self) -> eks.ICluster:
        """:attr:`cluster` as the ``eks.ICluster`` that charts, add-ons and node groups take.

        The Python type stubs of ``eks.Cluster`` do not declare the protocol member
        ``kubectl_provider_options``, so type checkers need this view.
        """
        return cast(eks.ICluster, self.cluster)

    @property
    def cluster_name_ref(self) -> str:
        """The cluster's name as a reference to the cluster resource (a token), which
        resources that need the cluster to exist take; asked of Node.js once."""
        if self._cluster_name_ref is None:
            self._cluster_name_ref = self.cluster.cluster_name
        return self._cluster_name_ref

    @property
    def kubectl_service_token(self) -> str:
        """The service token of the cluster's kubectl provider, which applies manifests;
        asked of Node.js once."""
        if self._kubectl_service_token is None:
            provider = self.cluster.kubectl_provider
            if provider is None:
                raise ValueError(f"EKS cluster {self.cluster_name!r} has no kubectl provider")
            self._kubectl_service_token = provider.service_token
        return self._kubectl_service_token

    @property
    def kubectl_barrier(self) -> IConstruct:
        """What a manifest applied by kubectl waits for: the resource aws-cdk-lib creates
        after the cluster's kubectl access (``KubectlReadyBarrier``), which its own manifests
        and Helm charts depend on."""
        if self._kubectl_barrier is None:
            self._kubectl_barrier = self.cluster.node.find_child("KubectlReadyBarrier")
        return self._kubectl_barrier

    @property
    def system_pool(self) -> NodePool:
        """The first CPU pool: system add-ons (autoscaler, operators) run there."""
        return system_pool_of(self.node_pools)

    def node_pool(self, name: str) -> NodePool:
        """The :class:`NodePool` called ``name``."""
        for pool in self.node_pools:
            if pool.name == name:
                return pool
        raise KeyError(
            f"no node pool {name!r}; pools: {', '.join(p.name for p in self.node_pools)}"
        )

    def zone_subnets(self, pool: NodePool) -> list[ec2.ISubnet]:
        """The private subnets of ``pool``'s zones, by index in the VPC's zones (every one
        when the pool names none)."""
        subnets = list(self.vpc.private_subnets)
        beyond = [z for z in pool.zones if z >= len(subnets)]
        if beyond:
            raise ValueError(
                f"node pool {pool.name!r}: zones {beyond} are beyond the VPC's {len(subnets)} "
                f"zones; use indexes 0 to {len(subnets) - 1}"
            )
        return [subnets[z] for z in pool.zones] if pool.zones else subnets

    def nodegroup(self, name: str) -> eks.Nodegroup:
        """The managed node group of the pool called ``name`` (with Karpenter, the system
        pool's only)."""
        return self._pool_nodegroup(name).nodegroup

    def namespace(self, name: str) -> eks.KubernetesManifest:
        """The manifest that creates namespace ``name``; objects in it depend on it."""
        try:
            return self._namespaces[name]
        except KeyError:
            raise KeyError(
                f"namespace {name!r} is not created by this cluster; it creates "
                f"{', '.join(self._namespaces)}"
            ) from None

    def add_pod_identity(
        self,
        construct_id: str,
        *,
        namespace: str,
        service_account: str,
        description: str,
        scope: Construct | None = None,
    ) -> PodIdentity:
        """A role for pods of ``service_account`` in ``namespace``, given through Pod Identity.

        The role trusts ``pods.eks.amazonaws.com`` (``sts:AssumeRole`` and
        ``sts:TagSession``, which Pod Identity needs to attach the session tags that name
        the cluster, namespace and service account) acting for this cluster of this account
        only (:attr:`pods_principal`). Grant it what the pods need. The
        association depends on the Pod Identity Agent add-on. ``scope`` (default: this
        construct) is where the role and association are created, e.g. a deployment's own
        construct.
        """
        scope = scope or self
        role = iam.Role(
            scope,
            f"{construct_id}Role",
            assumed_by=self.pods_principal,
            description=description,
        )
        # Its stack is then known to the grants and acknowledgments that ask for it.
        record_construct(role, scope)
        association = eks.CfnPodIdentityAssociation(
            scope,
            f"{construct_id}Association",
            cluster_name=self.cluster_name_ref,
            namespace=namespace,
            service_account=service_account,
            role_arn=role.role_arn,
        )
        association.add_resource_dependency(self.pod_identity_agent.resource)
        return PodIdentity(role=role, association=association)

    @property
    def pods_principal(self) -> iam.IPrincipal:
        """What Pod Identity roles trust: this cluster's pods only (:func:`pod_identity_principal`).

        One principal object serves every such role (principals are values; each role
        renders its own trust policy from it).
        """
        if self._pods_principal is None:
            self._pods_principal = pod_identity_principal(
                account=Stack.of(self).account, cluster_arn=self.cluster.cluster_arn
            )
        return self._pods_principal

    def _pool_nodegroup(self, name: str) -> PoolNodegroup:
        try:
            return self._nodegroups[name]
        except KeyError:
            raise KeyError(
                f"no managed node group for pool {name!r}; managed node groups: "
                f"{', '.join(self._nodegroups)}"
            ) from None

    def _new_vpc(self, max_azs: int, availability_zones: Sequence[str] | None) -> ec2.Vpc:
        zones = (
            list(availability_zones)
            if availability_zones
            else [Fn.select(i, Fn.get_azs()) for i in range(max_azs)]
        )
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(VPC_CIDR),
            availability_zones=zones,
            nat_gateways=len(zones),
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="Public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=_PUBLIC_SUBNET_CIDR_MASK,
                ),
                # Large private subnets: the VPC CNI gives every pod a VPC address.
                ec2.SubnetConfiguration(
                    name="Nodes",
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=_PRIVATE_SUBNET_CIDR_MASK,
                ),
            ],
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)
            },
        )
        if availability_zones:
            acknowledge(
                vpc,
                "CloudFormation-Validate::W3010",
                "Zones are named explicitly on purpose: they must offer the accelerator "
                "instance types, and naming them avoids an availability-zone lookup at synth.",
            )
        vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(
                logs.LogGroup(self, "FlowLogs", retention=logs.RetentionDays.THREE_MONTHS)
            ),
        )
        # Where the AWS Load Balancer Controller places load balancers: internet-facing ones in
        # the public subnets, internal ones in the private subnets.
        for subnet in vpc.public_subnets:
            Tags.of(subnet).add(PUBLIC_LOAD_BALANCER_SUBNET_TAG, "1")
        for subnet in vpc.private_subnets:
            Tags.of(subnet).add(INTERNAL_LOAD_BALANCER_SUBNET_TAG, "1")
        return vpc

    def _acknowledge_findings(self, *, public: bool) -> None:
        acknowledge(
            self.node_role,
            [managed_policy_finding(policy) for policy in NODE_POLICIES],
            "The AWS managed policies EKS requires for managed node groups; AWS keeps "
            "them current with what nodes need.",
        )
        acknowledge(
            self.cluster.role,
            managed_policy_finding("AmazonEKSClusterPolicy"),
            "The AWS managed policy EKS requires for the cluster's service role.",
        )
        kubectl_provider = self.cluster.node.find_child("KubectlProvider")
        acknowledge_managed_policies(
            kubectl_provider,
            "Policies CDK attaches to its kubectl handler and provider framework: logging, VPC "
            "network interfaces (the handler runs in the cluster's private subnets) and image "
            "pulls of the kubectl layer tooling.",
        )
        handler = kubectl_provider.node.find_child("Handler")
        if not isinstance(handler, lambda_.Function):
            raise TypeError(f"unexpected kubectl handler construct: {handler!r}")
        acknowledge(
            kubectl_provider,
            wildcard_resource_finding(kubectl_provider, f"{handler.function_arn}:*"),
            "The provider framework may invoke any version of the kubectl handler, and only it.",
        )
        acknowledge(
            handler,
            "AwsSolutions-L1",
            "The kubectl handler's Python runtime is chosen by aws-cdk-lib to match the "
            "kubectl layer; it moves with aws-cdk-lib upgrades.",
        )
        if public:
            acknowledge(
                self.cluster,
                "AwsSolutions-EKS1",
                "The public endpoint, opened on purpose with public_access_cidrs, lets "
                "operators on those networks run kubectl without a VPN; it is authenticated "
                "by IAM.",
            )
