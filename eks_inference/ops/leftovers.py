"""``leftovers``: what a destroyed platform left in the account, and how to remove each.

``cdk destroy`` deletes what CloudFormation created, but the cluster's controllers create
resources of their own that CloudFormation never knew: the load balancers, target groups and
security groups of the AWS Load Balancer Controller, the instances Karpenter launched, the
volumes of the EBS CSI driver, the network interfaces of the VPC CNI. Left behind (a destroy
that ran before the controllers cleaned up, a stack whose deletion failed), they cost money
and can block the VPC's deletion. Each creator tags what it makes with the cluster:

=====================================  ==========================================================
tag                                    put by (at the versions in :mod:`eks_inference.versions`)
=====================================  ==========================================================
``elbv2.k8s.aws/cluster: <name>``      the AWS Load Balancer Controller: load balancers, target
                                       groups, the security groups it manages
``eks:eks-cluster-name: <name>``       Karpenter: instances, and their volumes and interfaces
                                       (with ``karpenter.sh/nodepool``)
``eks:cluster-name: <name>``           EKS managed node groups: their instances
``aws:eks:cluster-name: <name>``       EKS itself: the cluster security group
``KubernetesCluster: <name>``          the EBS CSI driver run with ``--k8s-tag-cluster-id``
``cluster.k8s.amazonaws.com/name``     the VPC CNI: the network interfaces it attaches
``kubernetes.io/cluster/<name>``       Karpenter, node groups, EKS, the EBS CSI driver (with
                                       ``--k8s-tag-cluster-id``): any value (``owned``)
``aws:cloudformation:stack-name``      CloudFormation, on what the stack itself made: the FSx
                                       for Lustre file systems and their security groups
=====================================  ==========================================================

The cluster is the platform file's ``cluster_name``, the name the stack gives the EKS
cluster; the stack is ``InferenceStack`` and its nested stacks (``InferenceStack-...``). Every
call is a read-only ``Describe``, paginated, at most :data:`MAX_PAGES` pages per kind, within
the command's AWS deadlines; a page without its list is a failure
(:mod:`eks_inference.ops.aws.answers`), never an empty account. Each resource comes with the
AWS CLI command that removes it, listed in an order that works: instances before the volumes
and interfaces they hold, load balancers before their target groups, security groups last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eks_inference.ops.aws.errors import aws_errors
from eks_inference.ops.errors import CommandFailed

# Tags whose value is the cluster's name, each with what puts it (see the module's table).
CLUSTER_NAME_TAGS = (
    "elbv2.k8s.aws/cluster",
    "eks:eks-cluster-name",
    "eks:cluster-name",
    "aws:eks:cluster-name",
    "KubernetesCluster",
    "cluster.k8s.amazonaws.com/name",
)
CLUSTER_KEY_TAG_PREFIX = "kubernetes.io/cluster/"
STACK_NAME_TAG = "aws:cloudformation:stack-name"
# Pages of one kind's listing before the command gives up. Resources are matched here rather
# than by the services' tag filters, which cannot say "any of these keys with this value"; a
# page holds hundreds to a thousand, so 1,000 pages are far beyond a region's quotas.
MAX_PAGES = 1000
# ELBv2 DescribeTags takes at most 20 resources per call.
_ELBV2_TAGS_BATCH = 20
# Instances in these states still exist (and cost); terminated ones are gone.
_LIVE_INSTANCE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")


@dataclass(frozen=True)
class Leftover:
    """One resource the cluster's platform left: what, which, why it is the platform's, and
    the command that removes it."""

    kind: str
    id: str
    detail: str
    tag: str
    """The tag that ties it to the platform, as ``key=value``."""
    command: str


@dataclass(frozen=True)
class Owner:
    """Whose resources to look for: the cluster's name, the stack's, and the region."""

    cluster: str
    stack: str
    region: str

    def matching_tag(self, tags: Mapping[str, str]) -> str | None:
        """The tag of ``tags`` that makes a resource this platform's, as ``key=value``."""
        for key in CLUSTER_NAME_TAGS:
            if tags.get(key) == self.cluster:
                return f"{key}={self.cluster}"
        key = CLUSTER_KEY_TAG_PREFIX + self.cluster
        if key in tags:
            return f"{key}={tags[key]}"
        stack = tags.get(STACK_NAME_TAG, "")
        if stack == self.stack or stack.startswith(f"{self.stack}-"):
            return f"{STACK_NAME_TAG}={stack}"
        return None

    def aws(self, command: str) -> str:
        """An AWS CLI command in this platform's region."""
        service, rest = command.split(" ", 1)
        return f"aws {service} --region {self.region} {rest}"


def _tags(items: Sequence[Mapping[str, Any]] | None) -> dict[str, str]:
    return {str(t.get("Key")): str(t.get("Value", "")) for t in items or ()}


def _pages(client: Any, operation: str, **params: Any) -> Iterator[dict[str, Any]]:
    """The pages of a paginated listing, failing past :data:`MAX_PAGES`."""
    for number, page in enumerate(client.get_paginator(operation).paginate(**params), 1):
        if number > MAX_PAGES:
            raise CommandFailed(
                f"{operation} returned more than {MAX_PAGES} pages; the account holds more "
                "than this command lists, remove what it listed and run it again"
            )
        yield page


def instances(ec2: Any, owner: Owner) -> list[Leftover]:
    """EC2 instances not yet terminated."""
    found = []
    filters = [{"Name": "instance-state-name", "Values": list(_LIVE_INSTANCE_STATES)}]
    for page in _pages(ec2, "describe_instances", Filters=filters):
        for reservation in page["Reservations"]:
            for instance in reservation.get("Instances", []):
                tag = owner.matching_tag(_tags(instance.get("Tags")))
                if tag is None:
                    continue
                ident = str(instance["InstanceId"])
                state = instance.get("State", {}).get("Name", "?")
                found.append(
                    Leftover(
                        "EC2 instance",
                        ident,
                        f"{state}, {instance.get('InstanceType', '?')}",
                        tag,
                        owner.aws(f"ec2 terminate-instances --instance-ids {ident}"),
                    )
                )
    return found


def volumes(ec2: Any, owner: Owner) -> list[Leftover]:
    """EBS volumes."""
    found = []
    for page in _pages(ec2, "describe_volumes"):
        for volume in page["Volumes"]:
            tag = owner.matching_tag(_tags(volume.get("Tags")))
            if tag is None:
                continue
            ident = str(volume["VolumeId"])
            found.append(
                Leftover(
                    "EBS volume",
                    ident,
                    f"{volume.get('State', '?')}, {volume.get('Size', '?')} GiB",
                    tag,
                    owner.aws(f"ec2 delete-volume --volume-id {ident}"),
                )
            )
    return found


def network_interfaces(ec2: Any, owner: Owner) -> list[Leftover]:
    """Elastic network interfaces."""
    found = []
    for page in _pages(ec2, "describe_network_interfaces"):
        for interface in page["NetworkInterfaces"]:
            tag = owner.matching_tag(_tags(interface.get("TagSet")))
            if tag is None:
                continue
            ident = str(interface["NetworkInterfaceId"])
            found.append(
                Leftover(
                    "network interface",
                    ident,
                    f"{interface.get('Status', '?')}, {interface.get('Description') or '-'}",
                    tag,
                    owner.aws(f"ec2 delete-network-interface --network-interface-id {ident}"),
                )
            )
    return found


def security_groups(ec2: Any, owner: Owner) -> list[Leftover]:
    """Security groups."""
    found = []
    for page in _pages(ec2, "describe_security_groups"):
        for group in page["SecurityGroups"]:
            tag = owner.matching_tag(_tags(group.get("Tags")))
            if tag is None:
                continue
            ident = str(group["GroupId"])
            found.append(
                Leftover(
                    "security group",
                    ident,
                    f"{group.get('GroupName', '?')} in {group.get('VpcId', '?')}",
                    tag,
                    owner.aws(f"ec2 delete-security-group --group-id {ident}"),
                )
            )
    return found


def _elbv2_tags(elbv2: Any, arns: list[str]) -> dict[str, dict[str, str]]:
    """The tags of each ELBv2 resource, asked 20 at a time."""
    tags: dict[str, dict[str, str]] = {}
    for start in range(0, len(arns), _ELBV2_TAGS_BATCH):
        response = elbv2.describe_tags(ResourceArns=arns[start : start + _ELBV2_TAGS_BATCH])
        for description in response.get("TagDescriptions", []):
            tags[str(description.get("ResourceArn"))] = _tags(description.get("Tags"))
    return tags


def load_balancers(elbv2: Any, owner: Owner) -> list[Leftover]:
    """Application and Network Load Balancers."""
    balancers = [
        lb for page in _pages(elbv2, "describe_load_balancers") for lb in page["LoadBalancers"]
    ]
    tags = _elbv2_tags(elbv2, [str(lb["LoadBalancerArn"]) for lb in balancers])
    found = []
    for lb in balancers:
        arn = str(lb["LoadBalancerArn"])
        tag = owner.matching_tag(tags.get(arn, {}))
        if tag is not None:
            state = lb.get("State", {}).get("Code", "?")
            found.append(
                Leftover(
                    "load balancer",
                    arn,
                    f"{lb.get('Type', '?')}, {state}, {lb.get('DNSName', '-')}",
                    tag,
                    owner.aws(f"elbv2 delete-load-balancer --load-balancer-arn {arn}"),
                )
            )
    return found


def target_groups(elbv2: Any, owner: Owner) -> list[Leftover]:
    """Target groups."""
    groups = [tg for page in _pages(elbv2, "describe_target_groups") for tg in page["TargetGroups"]]
    tags = _elbv2_tags(elbv2, [str(tg["TargetGroupArn"]) for tg in groups])
    found = []
    for group in groups:
        arn = str(group["TargetGroupArn"])
        tag = owner.matching_tag(tags.get(arn, {}))
        if tag is not None:
            used_by = len(group.get("LoadBalancerArns", []))
            found.append(
                Leftover(
                    "target group",
                    arn,
                    f"{group.get('TargetType', '?')} targets, {used_by} load balancers",
                    tag,
                    owner.aws(f"elbv2 delete-target-group --target-group-arn {arn}"),
                )
            )
    return found


def file_systems(fsx: Any, owner: Owner) -> list[Leftover]:
    """FSx file systems."""
    found = []
    for page in _pages(fsx, "describe_file_systems"):
        for system in page["FileSystems"]:
            tag = owner.matching_tag(_tags(system.get("Tags")))
            if tag is None:
                continue
            ident = str(system["FileSystemId"])
            found.append(
                Leftover(
                    "FSx file system",
                    ident,
                    f"{system.get('FileSystemType', '?')}, {system.get('Lifecycle', '?')}",
                    tag,
                    owner.aws(f"fsx delete-file-system --file-system-id {ident}"),
                )
            )
    return found


@dataclass(frozen=True)
class LeftoverClients:
    """The AWS clients the listing uses, all in the platform's region."""

    ec2: Any
    elbv2: Any
    fsx: Any


def find_leftovers(clients: LeftoverClients, owner: Owner) -> list[Leftover]:
    """Every resource of the platform still in the account, in an order they can be removed."""
    listings: list[tuple[str, str, Callable[[Any, Owner], list[Leftover]], Any]] = [
        ("instances", "EC2", instances, clients.ec2),
        ("load balancers", "Elastic Load Balancing", load_balancers, clients.elbv2),
        ("target groups", "Elastic Load Balancing", target_groups, clients.elbv2),
        ("FSx file systems", "FSx", file_systems, clients.fsx),
        ("network interfaces", "EC2", network_interfaces, clients.ec2),
        ("volumes", "EC2", volumes, clients.ec2),
        ("security groups", "EC2", security_groups, clients.ec2),
    ]
    found: list[Leftover] = []
    for what, service, listing, client in listings:
        with aws_errors(f"list the {what} in {owner.region}", service):
            found += listing(client, owner)
    return found
