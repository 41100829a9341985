"""The Cluster Autoscaler, which scales the managed node groups (``NodeProvisioning.MANAGED``)."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Stack
from aws_cdk import aws_iam as iam

from eks_inference import versions
from eks_inference.constructs._nag import acknowledge, wildcard_resource_finding
from eks_inference.constructs.addons.helm import SYSTEM_NAMESPACE, HelmAddon, HelmRelease, on_pool
from eks_inference.constructs.addons.registry import PlatformAddons
from eks_inference.constructs.nodegroups import CLUSTER_AUTOSCALER_TAG_PREFIX

SERVICE_ACCOUNT = "cluster-autoscaler"


@dataclass(frozen=True)
class ClusterAutoscalerOptions:
    """How :class:`ClusterAutoscaler` is installed and scales."""

    chart: versions.HelmChartVersion = versions.CLUSTER_AUTOSCALER_CHART
    """Default ``versions.CLUSTER_AUTOSCALER_CHART``; the image is the cluster's Kubernetes
    version's (``cluster.release``), as the autoscaler requires."""
    expander: str = "least-waste"
    """Default ``least-waste``: of the node groups that could take a pending pod, grow the
    one that leaves the least idle CPU and memory (accelerator nodes are costly to idle)."""
    balance_similar_node_groups: bool = True
    """Default ``True``: the node groups of one pool, one per zone, scale together."""
    skip_nodes_with_local_storage: bool = False
    """Default ``False``: model servers and Ray pods use emptyDir caches; with ``True`` an
    idle accelerator node holding one would never be scaled down."""


class ClusterAutoscaler(HelmAddon[ClusterAutoscalerOptions]):
    """The Cluster Autoscaler on the system pool, with a least-privilege Pod Identity role.

    It discovers the node groups by their tags (``k8s.io/cluster-autoscaler/<cluster>``,
    :func:`~eks_inference.constructs.nodegroups.cluster_autoscaler_tags`), which carry the
    pools' labels and taints so that it can scale a group up from zero. Its role
    (``ClusterAutoscalerRole`` of the cluster, :attr:`role`) may describe Auto Scaling and
    EC2 (no resource-level permissions exist for those), describe this cluster's node groups,
    and set the capacity of, or terminate instances in, only the groups tagged as this
    cluster's. The release waits for the role's association, so its pods get credentials.
    Raises ``ValueError`` with ``NodeProvisioning.KARPENTER``, where Karpenter adds and
    removes the nodes and an autoscaler beside it would fight it over the system node group.
    """

    OPTIONS = ClusterAutoscalerOptions

    def _release(self, platform: PlatformAddons, options: ClusterAutoscalerOptions) -> HelmRelease:
        cluster = platform.cluster
        if not cluster.node_provisioning.runs_cluster_autoscaler:
            raise ValueError(
                "ClusterAutoscaler needs an InferenceCluster with managed node groups; with "
                f"node_provisioning {cluster.node_provisioning.value!r} Karpenter adds the nodes"
            )
        identity = cluster.add_pod_identity(
            "ClusterAutoscaler",
            namespace=SYSTEM_NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            description=f"Cluster Autoscaler of EKS cluster {cluster.cluster_name}",
        )
        role = identity.role
        stack = Stack.of(cluster)
        # Describe calls cannot be limited to resources; they reveal no data plane content.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeLaunchConfigurations",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:DescribeTags",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:GetInstanceTypesFromInstanceRequirements",
                ],
                resources=["*"],
            )
        )
        # Labels and taints of a managed node group come from EKS when it is at zero nodes.
        nodegroups = stack.format_arn(
            service="eks",
            resource="nodegroup",
            resource_name=f"{cluster.cluster_name}/*/*",
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=[nodegroups])
        )
        # Scaling only on groups tagged as this cluster's (the node groups' discovery tag).
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "autoscaling:SetDesiredCapacity",
                    "autoscaling:TerminateInstanceInAutoScalingGroup",
                ],
                resources=["*"],
                conditions={
                    "StringEquals": {
                        f"aws:ResourceTag/{CLUSTER_AUTOSCALER_TAG_PREFIX}/"
                        f"{cluster.cluster_name}": "owned"
                    }
                },
            )
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "Auto Scaling and EC2 describe actions support no resource-level permissions; "
            "SetDesiredCapacity and TerminateInstanceInAutoScalingGroup are limited by a "
            "condition on this cluster's autoscaler tag.",
        )
        acknowledge(
            role,
            wildcard_resource_finding(role, nodegroups),
            "DescribeNodegroup on this cluster's node groups only; their names carry a suffix "
            "chosen by CloudFormation.",
        )
        self.role = role
        return HelmRelease(
            pinned=options.chart,
            release="cluster-autoscaler",
            namespace=SYSTEM_NAMESPACE,
            values={
                "cloudProvider": "aws",
                "awsRegion": stack.region,
                "fullnameOverride": "cluster-autoscaler",
                "autoDiscovery": {"clusterName": cluster.cluster_name},
                "image": {
                    "repository": versions.CLUSTER_AUTOSCALER_IMAGE,
                    "tag": cluster.release.cluster_autoscaler_image_tag,
                },
                "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
                **on_pool(cluster.system_pool),
                "extraArgs": {
                    "balance-similar-node-groups": options.balance_similar_node_groups,
                    "expander": options.expander,
                    "skip-nodes-with-local-storage": options.skip_nodes_with_local_storage,
                },
            },
            after=(identity.association,),
        )
