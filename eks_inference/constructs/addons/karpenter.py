"""Karpenter: the node provisioner of ``node_provisioning: karpenter``, and what it needs.

The controller's IAM policy and its interruption rules are Karpenter's own reference
CloudFormation template for the pinned release (``data/karpenter_controller_policy.json``,
kept verbatim with its source, version and commit), filled in for one cluster: nothing here
grants the controller more than that documented policy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, ClassVar

from aws_cdk import Annotations, Duration, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import custom_resources as cr
from constructs import Construct

from eks_inference import versions
from eks_inference.charts.karpenter import (
    NODE_CLASSES_CRD,
    NODE_POOLS_CRD,
    karpenter_chart,
    karpenter_offers,
)
from eks_inference.charts.scheduling import KARPENTER_VM_MEMORY_OVERHEAD, NodeOffer
from eks_inference.constructs._nag import (
    acknowledge,
    managed_policy_finding,
    wildcard_resource_findings,
)
from eks_inference.constructs.addons.helm import (
    CRITICAL_ADDONS_TOLERATION,
    SYSTEM_NAMESPACE,
    PinnedHelmChart,
)
from eks_inference.constructs.addons.registry import PlatformAddons, Provides
from eks_inference.constructs.cluster import NODE_POLICIES, InferenceCluster
from eks_inference.constructs.efa_network import EfaNetwork
from eks_inference.constructs.sdk_call import sdk_call_resource
from eks_inference.names import KARPENTER_DISCOVERY_TAG, ZONE_TAG, karpenter_node_role_name
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.node_pools import karpenter_pools

if TYPE_CHECKING:
    from aws_cdk import aws_events as events
    from aws_cdk import aws_sqs as sqs

SERVICE_ACCOUNT = "karpenter"
POLICY_FILE = "karpenter_controller_policy.json"
# The documented policies the controller gets. ZonalShiftPolicy is left out: it lets the
# controller read an ARC zonal shift of the cluster, and settings.enableZonalShift stays off
# (the cluster has no zonal shift configuration).
ATTACHED_POLICIES = (
    "NodeLifecyclePolicy",
    "IAMIntegrationPolicy",
    "EKSIntegrationPolicy",
    "InterruptionPolicy",
    "ResourceDiscoveryPolicy",
)
_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")


@cache
def documented_policy() -> dict[str, Any]:
    """Karpenter's reference template, as kept in the package, with its provenance."""
    text = resources.files("eks_inference.constructs").joinpath("data", POLICY_FILE).read_text()
    document: dict[str, Any] = json.loads(text)
    return document


def fill(value: Any, values: Mapping[str, str]) -> Any:
    """``value`` (a policy document or part of one) with every ``${Name}`` replaced by
    ``values[Name]``, which may be a CDK token inside a string. Keys may only use literal
    values (IAM condition keys cannot be tokens)."""
    if isinstance(value, str):
        parts = _PLACEHOLDER.split(value)
        return "".join(values[p] if i % 2 else p for i, p in enumerate(parts))
    if isinstance(value, list):
        return [fill(item, values) for item in value]
    if isinstance(value, dict):
        return {fill(key, values): fill(item, values) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class KarpenterOptions:
    """How :class:`KarpenterNodeProvisioning` runs the controller."""

    max_replicas: int = 2
    """Default 2 (leader election), fewer when the system pool's ``min_size`` is smaller: the
    chart keeps replicas on different nodes, so there must always be a node for each."""
    controller_cpu: str = "1"
    """Default ``1``: the controller's CPU request and limit, as Karpenter's getting-started
    guide sets them."""
    controller_memory: str = "1Gi"
    """Default ``1Gi``: its memory request and limit, likewise."""


class KarpenterNodeProvisioning(Construct):
    """Karpenter (``versions.KARPENTER_CHART``) and the NodePools of every pool it provisions.

    Creates:

    * the **node role** ``KarpenterNodeRole-<cluster>`` (the name the EC2NodeClasses of
      ``k8s_manifests/`` give) with the managed node groups' policies, and its EKS **access
      entry** of type ``EC2_LINUX``, so nodes it launches join the cluster;
    * the **interruption queue** (SQS, SQS-managed encryption, TLS only, five-minute
      retention) fed by EventBridge rules for spot interruption warnings, rebalance
      recommendations, instance state changes, AWS Health scheduled events and capacity
      reservation interruptions, exactly as the reference template has them;
    * the **controller's Pod Identity role** with the reference template's policies filled in
      for this cluster, region, account, node role and queue (the only queue it can read);
    * **discovery tags** ``karpenter.sh/discovery: <cluster>`` on the cluster's private
      subnets and on the EKS cluster security group (tagged through the EC2 API, since EKS
      creates it), which the EC2NodeClasses select: Karpenter's nodes share the managed
      nodes' security group, so pods on either reach each other;
    * the **Helm releases**: the CRD chart first (Helm never upgrades the CRDs a chart ships
      in ``crds/``), then the controller on the system pool's managed nodes with the cluster
      name, the queue, the region (nodes keep instance metadata from pods) and the memory
      overhead the scheduling check assumes;
    * the **NodePools and EC2NodeClasses** (:func:`~eks_inference.charts.karpenter.karpenter_chart`)
      of the cluster's pools, with ``deployments`` deciding how long empty accelerator nodes
      stay and how long a drain may take. They are applied after the controller and deleted
      before it, so that Karpenter terminates the nodes it launched on ``cdk destroy``;
    * for each of those pools with ``efa``, its
      :class:`~eks_inference.constructs.efa_network.EfaNetwork` (:attr:`efa_networks`): the EFA
      security group and cluster placement group its EC2NodeClass selects by name, made
      before the NodePools are applied. The documented controller policy already lets
      Karpenter launch into any placement group and security group of the region with
      network interfaces it creates, and describe placement groups; nothing is added to it.

    It registers with ``platform`` as the node provisioner (its NodePools' :attr:`offers`
    are the nodes the scheduling check holds pods against) and as the installer of the
    NodePool and EC2NodeClass CRDs.

    Subnets of a ``vpc`` you brought yourself cannot be tagged here; tag them
    ``karpenter.sh/discovery: <cluster>`` (a synth warning says so). EC2 spot needs the
    account's ``AWSServiceRoleForEC2Spot`` service-linked role, which AWS creates once per
    account (``aws iam create-service-linked-role --aws-service-name spot.amazonaws.com``).
    """

    PROVIDES: ClassVar[Provides] = Provides(crds=(NODE_POOLS_CRD, NODE_CLASSES_CRD), nodes=True)

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        platform: PlatformAddons,
        deployments: Sequence[ModelDeploymentSpec] = (),
        options: KarpenterOptions | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        options = options or KarpenterOptions()
        cluster = platform.cluster
        if not cluster.node_provisioning.uses_karpenter:
            raise ValueError(
                "KarpenterNodeProvisioning needs an InferenceCluster with "
                "node_provisioning=NodeProvisioning.KARPENTER; with managed node groups every "
                "pool already has one"
            )
        stack = Stack.of(self)
        system = cluster.system_pool
        self.node_role = iam.Role(
            self,
            "NodeRole",
            role_name=karpenter_node_role_name(cluster.cluster_name),
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"Nodes Karpenter launches for EKS cluster {cluster.cluster_name}",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in NODE_POLICIES
            ],
        )
        acknowledge(
            self.node_role,
            [managed_policy_finding(policy) for policy in NODE_POLICIES],
            "The AWS managed policies EKS requires for nodes, the same the managed node "
            "groups' role has; AWS keeps them current with what nodes need.",
        )
        self.node_access = eks.AccessEntry(
            self,
            "NodeAccess",
            cluster=cluster.eks_cluster,
            principal=self.node_role.role_arn,
            access_entry_type=eks.AccessEntryType.EC2_LINUX,
            access_policies=[],
        )
        self.queue = self._interruption_queue()
        self.rules = self._interruption_rules()

        identity = cluster.add_pod_identity(
            "Controller",
            namespace=SYSTEM_NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            description=f"Karpenter controller of EKS cluster {cluster.cluster_name}",
            scope=self,
        )
        self.controller_role = identity.role
        self.policies = self._controller_policies(stack, cluster.cluster_name)

        self._tag_for_discovery(cluster)

        self.crd_chart = PinnedHelmChart(
            self,
            "Crds",
            cluster=cluster,
            pinned=versions.KARPENTER_CRD_CHART,
            release="karpenter-crd",
            namespace=SYSTEM_NAMESPACE,
        )
        self.controller_chart = PinnedHelmChart(
            self,
            "Controller",
            cluster=cluster,
            pinned=versions.KARPENTER_CHART,
            release="karpenter",
            namespace=SYSTEM_NAMESPACE,
            skip_crds=True,
            values={
                "replicas": min(options.max_replicas, system.min_size),
                "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT},
                "nodeSelector": system.node_selector(),
                "tolerations": [CRITICAL_ADDONS_TOLERATION, *system.tolerations()],
                "settings": {
                    "clusterName": cluster.cluster_name,
                    "interruptionQueue": self.queue.queue_name,
                    "vmMemoryOverheadPercent": float(KARPENTER_VM_MEMORY_OVERHEAD),
                },
                "controller": {
                    "env": [{"name": "AWS_REGION", "value": stack.region}],
                    "resources": {
                        side: {"cpu": options.controller_cpu, "memory": options.controller_memory}
                        for side in ("requests", "limits")
                    },
                },
            },
        )
        self.controller_chart.node.add_dependency(
            self.crd_chart,
            identity.association,
            *self.policies,
            cluster.nodegroup(system.name),
        )

        self.chart = karpenter_chart(
            cluster_name=cluster.cluster_name,
            pools=cluster.node_pools,
            deployments=deployments,
        )
        self.efa_networks = {
            p.pool.name: EfaNetwork(
                self,
                f"Efa-{p.pool.name}",
                vpc=cluster.vpc,
                cluster_name=cluster.cluster_name,
                pool=p.pool,
            )
            for p in karpenter_pools(cluster.node_pools)
            if p.pool.efa_interfaces
        }
        self.node_pools = eks.KubernetesManifest(
            self, "NodePools", cluster=cluster.eks_cluster, manifest=self.chart.to_json()
        )
        self.node_pools.node.add_dependency(
            self.controller_chart,
            self.node_access,
            self.node_role,
            *self.rules,
            *self.efa_networks.values(),
        )
        platform.set_node_provisioner(self)
        platform.add_crd_installer(self.PROVIDES.crds, self.crd_chart)

    @property
    def offers(self) -> tuple[NodeOffer, ...]:
        """The nodes its NodePools can launch, read back from the rendered objects."""
        return karpenter_offers(self.chart.objects)

    def _interruption_queue(self) -> sqs.Queue:
        # The SQS and EventBridge modules are loaded only by apps that provision with Karpenter.
        from aws_cdk import aws_sqs as sqs

        settings = documented_policy()["interruption_queue"]
        if not settings.get("SqsManagedSseEnabled"):
            raise ValueError(f"review {POLICY_FILE}: its interruption queue is not encrypted")
        queue = sqs.Queue(
            self,
            "InterruptionQueue",
            retention_period=Duration.seconds(int(settings["MessageRetentionPeriod"])),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        acknowledge(
            queue,
            "AwsSolutions-SQS3",
            "Karpenter's interruption events are current for minutes (five-minute retention) "
            "and the controller deletes what it handles; a dead-letter queue would only keep "
            "stale notices.",
        )
        return queue

    def _interruption_rules(self) -> list[events.Rule]:
        from aws_cdk import aws_events as events
        from aws_cdk import aws_events_targets as targets

        rules = []
        for name, pattern in documented_policy()["interruption_rules"].items():
            if set(pattern) != {"source", "detail-type"}:
                raise ValueError(f"review {POLICY_FILE}: rule {name} matches {sorted(pattern)}")
            rules.append(
                events.Rule(
                    self,
                    name,
                    description=f"Karpenter interruption handling: {pattern['detail-type'][0]}",
                    event_pattern=events.EventPattern(
                        source=pattern["source"], detail_type=pattern["detail-type"]
                    ),
                    targets=[targets.SqsQueue(self.queue)],
                )
            )
        return rules

    def _controller_policies(self, stack: Stack, cluster_name: str) -> list[iam.ManagedPolicy]:
        values = {
            "AWS::Partition": stack.partition,
            "AWS::Region": stack.region,
            "AWS::AccountId": stack.account,
            "ClusterName": cluster_name,
            "KarpenterNodeRole.Arn": self.node_role.role_arn,
            "KarpenterInterruptionQueue.Arn": self.queue.queue_arn,
        }
        documented = documented_policy()["policies"]
        policies = []
        for name in ATTACHED_POLICIES:
            document = fill(documented[name], values)
            policy = iam.ManagedPolicy(
                self,
                name,
                description=f"Karpenter {versions.KARPENTER_VERSION} {name} for {cluster_name}",
                document=iam.PolicyDocument.from_json(document),
                roles=[self.controller_role],
            )
            wildcards = [
                resource
                for statement in document["Statement"]
                for resource in _as_list(statement["Resource"])
                if "*" in resource
            ]
            acknowledge(
                policy,
                wildcard_resource_findings(policy, wildcards),
                f"Karpenter's documented controller policy ({name}, release "
                f"{versions.KARPENTER_VERSION}): instances, launch templates, fleets and "
                "instance profiles have names chosen at launch, so they are matched by ARN "
                "pattern and scoped by conditions on this cluster's tags; describe and pricing "
                "calls support no resource-level permissions.",
            )
            policies.append(policy)
        return policies

    def _tag_for_discovery(self, cluster: InferenceCluster) -> None:
        name = cluster.cluster_name
        untaggable = False
        zoned = any(pool.zones for pool in cluster.node_pools)
        for index, subnet in enumerate(cluster.vpc.private_subnets):
            if isinstance(subnet.node.default_child, ec2.CfnSubnet):
                Tags.of(subnet).add(KARPENTER_DISCOVERY_TAG, name)
                if zoned:
                    Tags.of(subnet).add(ZONE_TAG, str(index))
            else:
                untaggable = True
        if untaggable:
            Annotations.of(self).add_warning_v2(
                "eks-inference:karpenter-subnets",
                f"Karpenter finds node subnets by the tag {KARPENTER_DISCOVERY_TAG}={name}; "
                "tag the private subnets of the VPC you brought, which this app cannot.",
            )
        group_id = cluster.cluster.cluster_security_group_id
        stack = Stack.of(self)
        group_arn = stack.format_arn(
            service="ec2", resource="security-group", resource_name=group_id
        )
        tag_call = cr.AwsSdkCall(
            service="EC2",
            action="createTags",
            parameters={
                "Resources": [group_id],
                "Tags": [{"Key": KARPENTER_DISCOVERY_TAG, "Value": name}],
            },
            physical_resource_id=cr.PhysicalResourceId.of(f"{group_id}-karpenter-discovery"),
        )
        self.security_group_tag = sdk_call_resource(
            self,
            "SecurityGroupDiscoveryTag",
            tag_call,
            iam.PolicyStatement(actions=["ec2:CreateTags"], resources=[group_arn]),
        )


def _as_list(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)
