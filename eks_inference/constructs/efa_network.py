"""``EfaNetwork``: the security group and cluster placement group of a node pool with EFA.

Managed node groups (:class:`~eks_inference.constructs.nodegroups.PoolNodegroup`) and
Karpenter (:class:`~eks_inference.constructs.addons.karpenter.KarpenterNodeProvisioning`)
both create one per pool with ``efa``, named by
:func:`~eks_inference.charts.efa_interfaces.efa_group_name`.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import custom_resources as cr
from constructs import Construct

from eks_inference.charts.efa_interfaces import (
    PLACEMENT_STRATEGY,
    NetworkInterface,
    efa_group_name,
    efa_network_interfaces,
)
from eks_inference.constructs.sdk_call import sdk_call_resource
from eks_inference.specification.node_pools import NodePool


class EfaNetwork(Construct):
    """What the EFA interfaces of ``pool``'s nodes need, in ``vpc``:

    * a **security group** (:attr:`security_group`) that admits all traffic from itself and
      sends all traffic to itself, and nothing else: EFA's requirement (EC2 User Guide, "Get
      started with EFA", prepare an EFA-enabled security group), put on every interface of
      the pool's nodes, beside the cluster security group on the primary one;
    * a **cluster placement group** (:attr:`placement_group_name`), so the nodes of one
      multi-node replica sit close together in the pool's one zone. CloudFormation's
      ``AWS::EC2::PlacementGroup`` takes no name and Karpenter selects a placement group by
      name or id only, so the group is created (and deleted) by the EC2 API with the fixed
      name :func:`~eks_inference.charts.efa_interfaces.efa_group_name`, which the EC2NodeClasses in
      ``k8s_manifests/`` also name. Its custom resource may create and delete that one
      group and nothing else. Apply what launches into it after :attr:`placement_group`, so
      that it is also deleted after the nodes in it (EC2 refuses to delete a group in use).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        cluster_name: str,
        pool: NodePool,
    ) -> None:
        super().__init__(scope, construct_id)
        if not pool.efa_interfaces:
            raise ValueError(f"node pool {pool.name!r} has no EFA (efa is off)")
        name = efa_group_name(cluster_name, pool)
        self.security_group = ec2.SecurityGroup(
            self,
            "SecurityGroup",
            vpc=vpc,
            security_group_name=name,
            description=f"EFA traffic between the nodes of pool {pool.name} of {cluster_name}",
            allow_all_outbound=False,
        )
        self.security_group.add_ingress_rule(
            self.security_group, ec2.Port.all_traffic(), "EFA: all traffic from the pool's nodes"
        )
        self.security_group.add_egress_rule(
            self.security_group, ec2.Port.all_traffic(), "EFA: all traffic to the pool's nodes"
        )
        self.placement_group_name = name
        group_arn = Stack.of(self).format_arn(
            service="ec2", resource="placement-group", resource_name=name
        )
        self.placement_group = sdk_call_resource(
            self,
            "PlacementGroup",
            cr.AwsSdkCall(
                service="EC2",
                action="createPlacementGroup",
                parameters={"GroupName": name, "Strategy": PLACEMENT_STRATEGY},
                physical_resource_id=cr.PhysicalResourceId.of(name),
            ),
            iam.PolicyStatement(
                actions=["ec2:CreatePlacementGroup", "ec2:DeletePlacementGroup"],
                resources=[group_arn],
            ),
            on_delete=cr.AwsSdkCall(
                service="EC2",
                action="deletePlacementGroup",
                parameters={"GroupName": name},
                # Deleting a group that is already gone is done; one still in use fails.
                ignore_error_codes_matching="InvalidPlacementGroup.Unknown",
            ),
        )
        self.interfaces = efa_network_interfaces(pool)

    def launch_template_interfaces(self, cluster_security_group_id: str) -> list[dict[str, Any]]:
        """The ``NetworkInterfaces`` of a launch template for the pool's nodes: every
        interface with the EFA security group, the primary also with
        ``cluster_security_group_id`` (with interfaces in a launch template, EKS adds no
        security group of its own). No subnet: the node group chooses it."""
        return [
            {
                "NetworkCardIndex": interface.network_card,
                "DeviceIndex": interface.device,
                "InterfaceType": interface.type,
                "Groups": self._groups(interface, cluster_security_group_id),
            }
            for interface in self.interfaces
        ]

    def _groups(self, interface: NetworkInterface, cluster_security_group_id: str) -> list[str]:
        own = self.security_group.security_group_id
        primary = (interface.network_card, interface.device) == (0, 0)
        return [cluster_security_group_id, own] if primary else [own]
