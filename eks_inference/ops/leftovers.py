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

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class _Kind:
    """How one kind of resource is listed, told apart and removed.

    ``operation`` is the paginated ``Describe`` call (with ``params``), ``listed`` the
    resources of one of its pages, ``id_key`` the field that names one; ``tags_key`` the field
    holding its tags, or ``None`` for ELBv2, whose listings carry none (they are asked with
    DescribeTags); ``detail`` what the table shows of it, ``removal`` the AWS CLI command that
    removes it, with ``{id}`` for its id.
    """

    title: str
    operation: str
    listed: Callable[[Mapping[str, Any]], Iterable[Mapping[str, Any]]]
    id_key: str
    tags_key: str | None
    detail: Callable[[Mapping[str, Any]], str]
    removal: str
    params: Mapping[str, Any] = field(default_factory=dict)


def _instances(page: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for reservation in page["Reservations"]:
        yield from reservation.get("Instances", [])


_INSTANCES = _Kind(
    "EC2 instance",
    "describe_instances",
    _instances,
    "InstanceId",
    "Tags",
    lambda i: f"{i.get('State', {}).get('Name', '?')}, {i.get('InstanceType', '?')}",
    "ec2 terminate-instances --instance-ids {id}",
    {"Filters": [{"Name": "instance-state-name", "Values": list(_LIVE_INSTANCE_STATES)}]},
)
_VOLUMES = _Kind(
    "EBS volume",
    "describe_volumes",
    lambda page: page["Volumes"],
    "VolumeId",
    "Tags",
    lambda v: f"{v.get('State', '?')}, {v.get('Size', '?')} GiB",
    "ec2 delete-volume --volume-id {id}",
)
_NETWORK_INTERFACES = _Kind(
    "network interface",
    "describe_network_interfaces",
    lambda page: page["NetworkInterfaces"],
    "NetworkInterfaceId",
    "TagSet",
    lambda n: f"{n.get('Status', '?')}, {n.get('Description') or '-'}",
    "ec2 delete-network-interface --network-interface-id {id}",
)
_SECURITY_GROUPS = _Kind(
    "security group",
    "describe_security_groups",
    lambda page: page["SecurityGroups"],
    "GroupId",
    "Tags",
    lambda g: f"{g.get('GroupName', '?')} in {g.get('VpcId', '?')}",
    "ec2 delete-security-group --group-id {id}",
)
_LOAD_BALANCERS = _Kind(
    "load balancer",
    "describe_load_balancers",
    lambda page: page["LoadBalancers"],
    "LoadBalancerArn",
    None,
    lambda lb: (
        f"{lb.get('Type', '?')}, {lb.get('State', {}).get('Code', '?')}, {lb.get('DNSName', '-')}"
    ),
    "elbv2 delete-load-balancer --load-balancer-arn {id}",
)
_TARGET_GROUPS = _Kind(
    "target group",
    "describe_target_groups",
    lambda page: page["TargetGroups"],
    "TargetGroupArn",
    None,
    lambda tg: (
        f"{tg.get('TargetType', '?')} targets, {len(tg.get('LoadBalancerArns', []))} load balancers"
    ),
    "elbv2 delete-target-group --target-group-arn {id}",
)
_FILE_SYSTEMS = _Kind(
    "FSx file system",
    "describe_file_systems",
    lambda page: page["FileSystems"],
    "FileSystemId",
    "Tags",
    lambda fs: f"{fs.get('FileSystemType', '?')}, {fs.get('Lifecycle', '?')}",
    "fsx delete-file-system --file-system-id {id}",
)


def _elbv2_tags(elbv2: Any, arns: list[str]) -> dict[str, dict[str, str]]:
    """The tags of each ELBv2 resource, asked 20 at a time."""
    tags: dict[str, dict[str, str]] = {}
    for start in range(0, len(arns), _ELBV2_TAGS_BATCH):
        response = elbv2.describe_tags(ResourceArns=arns[start : start + _ELBV2_TAGS_BATCH])
        for description in response.get("TagDescriptions", []):
            tags[str(description.get("ResourceArn"))] = _tags(description.get("Tags"))
    return tags


def _listing(client: Any, owner: Owner, kind: _Kind) -> list[Leftover]:
    """The resources of ``kind`` that a tag ties to ``owner``'s platform."""
    resources = [
        resource
        for page in _pages(client, kind.operation, **kind.params)
        for resource in kind.listed(page)
    ]
    ids = [str(resource[kind.id_key]) for resource in resources]
    if kind.tags_key is None:
        tags = _elbv2_tags(client, ids)
    else:
        tags = {i: _tags(r.get(kind.tags_key)) for i, r in zip(ids, resources, strict=True)}
    found = []
    for ident, resource in zip(ids, resources, strict=True):
        tag = owner.matching_tag(tags.get(ident, {}))
        if tag is not None:
            command = owner.aws(kind.removal.format(id=ident))
            found.append(Leftover(kind.title, ident, kind.detail(resource), tag, command))
    return found


@dataclass(frozen=True)
class LeftoverClients:
    """The AWS clients the listing uses, all in the platform's region."""

    ec2: Any
    elbv2: Any
    fsx: Any


def find_leftovers(clients: LeftoverClients, owner: Owner) -> list[Leftover]:
    """Every resource of the platform still in the account, in an order they can be removed."""
    listings: list[tuple[str, str, _Kind, Any]] = [
        ("instances", "EC2", _INSTANCES, clients.ec2),
        ("load balancers", "Elastic Load Balancing", _LOAD_BALANCERS, clients.elbv2),
        ("target groups", "Elastic Load Balancing", _TARGET_GROUPS, clients.elbv2),
        ("FSx file systems", "FSx", _FILE_SYSTEMS, clients.fsx),
        ("network interfaces", "EC2", _NETWORK_INTERFACES, clients.ec2),
        ("volumes", "EC2", _VOLUMES, clients.ec2),
        ("security groups", "EC2", _SECURITY_GROUPS, clients.ec2),
    ]
    found: list[Leftover] = []
    for what, service, kind, client in listings:
        with aws_errors(f"list the {what} in {owner.region}", service):
            found += _listing(client, owner, kind)
    return found
