"""Managed node groups built from :class:`~eks_inference.specification.node_pools.NodePool` objects.

Everything a node group needs (AMI type, instance types, sizes, labels, taints, root volume
and the Cluster Autoscaler's scale-from-zero hints) is read from the pool, so the nodes, the
autoscaler and the pods' selectors and tolerations cannot disagree.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import custom_resources as cr
from constructs import Construct

from eks_inference.charts.node_bootstrap import mime_user_data, node_config
from eks_inference.constructs._nag import (
    acknowledge,
    acknowledge_managed_policies,
    wildcard_resource_finding,
)
from eks_inference.constructs.efa_network import EfaNetwork
from eks_inference.constructs.sdk_call import sdk_call_resource
from eks_inference.specification.node_pools import IMDS_HOP_LIMIT, ROOT_DEVICE, NodePool

CLUSTER_AUTOSCALER_TAG_PREFIX = "k8s.io/cluster-autoscaler"
NODE_TEMPLATE_TAG_PREFIX = f"{CLUSTER_AUTOSCALER_TAG_PREFIX}/node-template"
_ASG_NAME_PATH = "nodegroup.resources.autoScalingGroups.0.name"
# The stack-wide singleton Lambda behind every AwsCustomResource.
_CUSTOM_RESOURCE_PROVIDER_ID = "AWS" + cr.AwsCustomResource.PROVIDER_FUNCTION_UUID.replace("-", "")
# Marks that provider once its policies are acknowledged.
_ACKNOWLEDGED = "_eks_inference_policies_acknowledged"

_AMI_TYPES: dict[str, eks.NodegroupAmiType] = {
    "AL2023_x86_64_STANDARD": eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
    "AL2023_x86_64_NEURON": eks.NodegroupAmiType.AL2023_X86_64_NEURON,
    "AL2023_x86_64_NVIDIA": eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
}
_TAINT_EFFECTS: dict[str, eks.TaintEffect] = {
    "NO_SCHEDULE": eks.TaintEffect.NO_SCHEDULE,
    "PREFER_NO_SCHEDULE": eks.TaintEffect.PREFER_NO_SCHEDULE,
    "NO_EXECUTE": eks.TaintEffect.NO_EXECUTE,
}
_CAPACITY_TYPES: dict[str, eks.CapacityType] = {
    "ON_DEMAND": eks.CapacityType.ON_DEMAND,
    "SPOT": eks.CapacityType.SPOT,
}


def cluster_autoscaler_tags(pool: NodePool, cluster_name: str) -> dict[str, str]:
    """Tags the Cluster Autoscaler reads from a node group's Auto Scaling group.

    Auto-discovery finds the group by the first two; the ``node-template`` tags describe a node
    that does not exist yet (labels, taints as ``value:Effect``, device-plugin resources such
    as ``aws.amazon.com/neuroncore``), so a pod that needs them can scale the group up from
    zero. Without them the autoscaler only learns what a node offers after one is running.
    """
    tags = {
        f"{CLUSTER_AUTOSCALER_TAG_PREFIX}/enabled": "true",
        f"{CLUSTER_AUTOSCALER_TAG_PREFIX}/{cluster_name}": "owned",
    }
    for key, value in pool.labels.items():
        tags[f"{NODE_TEMPLATE_TAG_PREFIX}/label/{key}"] = value
    for taint in pool.taints:
        tags[f"{NODE_TEMPLATE_TAG_PREFIX}/taint/{taint.key}"] = f"{taint.value}:{taint.effect}"
    for resource, amount in pool.extended_resources().items():
        tags[f"{NODE_TEMPLATE_TAG_PREFIX}/resources/{resource}"] = str(amount)
    return tags


# aws-cdk-lib's Nodegroup (2.275) counts GPU instance classes up to P4D and G6E and refuses
# the NVIDIA AMI for newer ones ("The specified AMI does not match the instance types
# architecture"); a pool of these names its instance types on the CloudFormation resource
# itself, with the same AMI type.
_GPU_FAMILIES_CDK_LACKS = frozenset({"p5", "p5en"})


class PoolNodegroup(Construct):
    """One EKS managed node group for a :class:`NodePool`, and its autoscaler tags.

    Creates an ``eks.Nodegroup`` directly rather than through ``Cluster.add_nodegroup_capacity``
    (which also installs an old bundled Neuron device plugin on inf/trn instance types), with
    a launch template that gives the nodes an encrypted gp3 root volume sized by the pool,
    requires IMDSv2 with a hop limit of 1 (:data:`IMDS_HOP_LIMIT`) and, on accelerator pools,
    carries the NodeConfig of :mod:`eks_inference.charts.node_bootstrap` in its user data (the NVMe
    instance store striped and mounted for pods, the static CPU manager and the family's
    topology manager policy; :attr:`node_config`), which EKS merges with its own. The pool's Cluster
    Autoscaler tags are set on the node group and copied onto its Auto Scaling group, which
    EKS creates without them and which is where the autoscaler reads them.

    A pool with ``efa`` also gets its :class:`~eks_inference.constructs.efa_network.EfaNetwork`
    (:attr:`efa`): the launch template gives each node the pool's EFA interfaces (the primary
    with the cluster security group and the EFA one, every EFA-only interface with the EFA one)
    and launches it into the pool's cluster placement group.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        cluster_name: str,
        pool: NodePool,
        node_role: iam.IRole,
        subnets: ec2.SubnetSelection,
    ) -> None:
        super().__init__(scope, construct_id)
        self.pool = pool
        self.node_config = node_config(pool)
        user_data = (
            ec2.UserData.custom(mime_user_data(self.node_config))
            if self.node_config is not None
            else None
        )
        self.launch_template = ec2.LaunchTemplate(
            self,
            "LaunchTemplate",
            user_data=user_data,
            require_imdsv2=True,
            http_put_response_hop_limit=IMDS_HOP_LIMIT,
            block_devices=[
                ec2.BlockDevice(
                    device_name=ROOT_DEVICE,
                    volume=ec2.BlockDeviceVolume.ebs(
                        pool.root_volume_gib,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                        encrypted=True,
                        delete_on_termination=True,
                    ),
                )
            ],
        )
        self.efa = (
            EfaNetwork(self, "Efa", vpc=cluster.vpc, cluster_name=cluster_name, pool=pool)
            if pool.efa_interfaces
            else None
        )
        if self.efa is not None:
            self._attach_efa(self.efa, cluster.cluster_security_group_id)
        self.tags = cluster_autoscaler_tags(pool, cluster_name)
        known = pool.instance.family not in _GPU_FAMILIES_CDK_LACKS
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            ami_type=_AMI_TYPES[pool.ami_type],
            instance_types=[ec2.InstanceType(t) for t in pool.instance_types] if known else None,
            capacity_type=_CAPACITY_TYPES[pool.capacity_type],
            min_size=pool.min_size,
            max_size=pool.max_size,
            # The autoscaler owns the desired size once the group exists; CloudFormation only
            # sets it at creation, to the minimum.
            desired_size=pool.min_size,
            labels=pool.labels,
            taints=[
                eks.TaintSpec(
                    key=t.key, value=t.value, effect=_TAINT_EFFECTS[t.cloudformation_effect]
                )
                for t in pool.taints
            ],
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.launch_template_id or "",
                version=self.launch_template.latest_version_number,
            ),
            node_role=node_role,
            subnets=subnets,
            tags=self.tags,
        )
        if not known:
            resource = self.nodegroup.node.default_child
            assert isinstance(resource, eks.CfnNodegroup)
            resource.add_property_override("InstanceTypes", list(pool.instance_types))
        self._tag_auto_scaling_group(cluster_name)

    def _attach_efa(self, efa: EfaNetwork, cluster_security_group_id: str) -> None:
        # The launch template construct has no network interfaces or placement of its own.
        template = self.launch_template.node.default_child
        assert isinstance(template, ec2.CfnLaunchTemplate)
        template.add_property_override(
            "LaunchTemplateData.NetworkInterfaces",
            efa.launch_template_interfaces(cluster_security_group_id),
        )
        template.add_property_override(
            "LaunchTemplateData.Placement", {"GroupName": efa.placement_group_name}
        )
        # The group is named, not referenced: it must exist before the template names it.
        self.launch_template.node.add_dependency(efa.placement_group)

    def _tag_auto_scaling_group(self, cluster_name: str) -> None:
        stack = Stack.of(self)
        describe_nodegroup = self._describe_nodegroup_call()
        find_group = sdk_call_resource(
            self,
            "AutoScalingGroup",
            describe_nodegroup,
            iam.PolicyStatement(
                actions=["eks:DescribeNodegroup"], resources=[self.nodegroup.nodegroup_arn]
            ),
        )
        group_name = find_group.get_response_field(_ASG_NAME_PATH)
        tag_call = cr.AwsSdkCall(
            service="AutoScaling",
            action="createOrUpdateTags",
            parameters={
                "Tags": [
                    {
                        "ResourceId": group_name,
                        "ResourceType": "auto-scaling-group",
                        "Key": key,
                        "Value": value,
                        # The node itself gets labels and taints from EKS, not from tags.
                        "PropagateAtLaunch": False,
                    }
                    for key, value in sorted(self.tags.items())
                ]
            },
            physical_resource_id=cr.PhysicalResourceId.of(group_name),
        )
        # EKS names every managed node group's Auto Scaling group `eks-<nodegroup>-<uuid>`
        # and tags it with its cluster; the role may tag no other group.
        group_arns = stack.format_arn(
            service="autoscaling",
            resource="autoScalingGroup",
            resource_name="*:autoScalingGroupName/eks-*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        tag_group = sdk_call_resource(
            self,
            "AutoScalingGroupTags",
            tag_call,
            iam.PolicyStatement(
                actions=["autoscaling:CreateOrUpdateTags"],
                resources=[group_arns],
                conditions={"StringEquals": {"aws:ResourceTag/eks:cluster-name": cluster_name}},
            ),
        )
        acknowledge(
            tag_group,
            wildcard_resource_finding(self, group_arns),
            "Auto Scaling group names carry a random suffix chosen by EKS; the statement is "
            "limited to EKS-created groups (eks-*) tagged with this cluster's name.",
        )

        provider = stack.node.try_find_child(_CUSTOM_RESOURCE_PROVIDER_ID)
        # The provider is one per stack: acknowledged by the first node group that uses it.
        if provider is not None and not provider.__dict__.get(_ACKNOWLEDGED, False):
            acknowledge_managed_policies(
                provider,
                "The logging policy CDK attaches to the shared AWS SDK custom resource Lambda.",
            )
            provider.__dict__[_ACKNOWLEDGED] = True

    def _describe_nodegroup_call(self) -> cr.AwsSdkCall:
        return cr.AwsSdkCall(
            service="EKS",
            action="describeNodegroup",
            parameters={
                "clusterName": self.nodegroup.cluster.cluster_name,
                "nodegroupName": self.nodegroup.nodegroup_name,
            },
            physical_resource_id=cr.PhysicalResourceId.from_response(_ASG_NAME_PATH),
            output_paths=[_ASG_NAME_PATH],
        )
