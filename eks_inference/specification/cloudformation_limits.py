"""CloudFormation's per-stack quotas, and how much of them a platform's stacks use, before synth.

A platform too large for one stack used to pass ``plan`` and ``manifests`` and fail only in
synth (CDK's resource-count check) or at deploy time. :func:`parent_stack_use` counts, from
the spec alone (no aws-cdk), the resources and outputs of the parent stack and estimates its
template size, so that validation can refuse such a platform and name the field that grows it.

The figures are those the constructs create, one term per construct: every managed node group
is a launch template, the node group and two custom resources (each with a policy) that copy
its autoscaler tags onto its Auto Scaling group; every deployment is one nested-stack resource
in the parent; every base URL the stack outputs (an exposed deployment's, a traffic split's:
:func:`~eks_inference.specification.routes.base_url_outputs`, what the stack creates them from) is
an
output, and the splits' Ingresses one manifest resource; a deployment with an endpoint picker
adds the InferencePool CRD's manifest, once; the Mountpoint driver's
role grows by two statements per bucket prefix mounted, which CDK moves into managed policies
beyond the inline policy size (simulated here as CDK packs them). The tests synthesize several
shapes of platform and check every count exactly and the size within its margin.

Nested stacks are not checked: each holds one deployment, at most
:data:`NESTED_STACK_BOUND` (the tests check every kind of deployment against it), far inside
every quota.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from eks_inference.catalog import Accelerator
from eks_inference.specification.artifacts import artifact_prefix
from eks_inference.specification.capabilities import ServesAdapters, ServesModelRepository
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.endpoints import Endpoint
from eks_inference.specification.engines import engine_of
from eks_inference.specification.node_pools import NodePool, system_pool_of
from eks_inference.specification.provisioning import NodeProvisioning
from eks_inference.specification.routes import Route, SplitRoute, base_url_outputs

# CloudFormation's quotas per stack ("Understand CloudFormation quotas" in the CloudFormation
# User Guide; cfn-lint's limits agree). Templates are passed through S3 (CDK uploads each as
# an asset), whose body limit is 1 MB rather than the 51,200 bytes of an inline body.
MAX_RESOURCES = 500
MAX_OUTPUTS = 200
MAX_TEMPLATE_BYTES = 1_000_000


@dataclass(frozen=True)
class StackUse:
    """How much of CloudFormation's per-stack quotas a template uses."""

    resources: int
    outputs: int
    template_bytes: int


@dataclass(frozen=True)
class ParentStackUse:
    """The parent stack's use, and the shares of it that grow with each list of the spec."""

    total: StackUse
    node_pools: StackUse
    deployments: StackUse
    per_node_pool: StackUse
    per_deployment: StackUse


# Every nested stack stays within this: one manifest custom resource, a Pod Identity
# role, policy and association per service account, and the manifests' text (a Neuron
# RayService with its serving code is about 100 KB).
NESTED_STACK_BOUND = StackUse(resources=16, outputs=0, template_bytes=300_000)

# Resources every parent stack has: the VPC, the cluster and its kubectl provider, the model
# bucket, the add-ons installed whatever the pools (Pod Identity agent, VPC CNI, Mountpoint,
# KubeRay, metrics stack and its namespace, KEDA) and the custom-resource providers.
_CORE_RESOURCES = 82
_CORE_OUTPUTS = 2
_CORE_BYTES = 73_800
# Karpenter's controller, its interruption queue and rules, node role and policies, in place
# of the Cluster Autoscaler.
_KARPENTER_RESOURCES = 17
_KARPENTER_BYTES = 32_000
# A managed node group: launch template, node group, two tag-copying custom resources and
# their two policies. Accelerator pools' labels and taints make theirs larger.
_NODE_GROUP_RESOURCES = 6
_NODE_GROUP_BYTES = 9_400
_NODE_GROUP_ACCELERATOR_BYTES = 12_000
# A pool Karpenter provisions is an EC2NodeClass and a NodePool in one manifest resource.
_KARPENTER_POOL_BYTES = 2_200
# Device plugins and exporters, installed when some pool has the accelerator.
_ACCELERATOR_ADDONS: dict[Accelerator, tuple[int, int]] = {
    Accelerator.NEURON: (2, 5_000),
    Accelerator.NVIDIA: (2, 3_200),
}
# The AWS Load Balancer Controller (chart, role, policy, association), and with API keys the
# secret, External Secrets Operator and its identity and SecretStore.
_ENDPOINT_RESOURCES, _ENDPOINT_BYTES = 4, 17_000
_API_KEY_RESOURCES, _API_KEY_BYTES = 6, 5_800
_API_KEY_OUTPUTS = 1
# The InferencePool CRD's manifest (the pinned CRD, about 13 KB of template), applied once when
# some deployment routes through an endpoint picker.
_INFERENCE_EXTENSION_RESOURCES, _INFERENCE_EXTENSION_BYTES = 1, 13_500
# The lookup of the load balancer's DNS name, for routes without a host of their own.
_HOST_LOOKUP_RESOURCES, _HOST_LOOKUP_BYTES = 1, 900
# The manifest of the splits' Ingresses (one resource for them all), and each Ingress in it.
_SPLITS_RESOURCES, _SPLITS_BYTES, _SPLIT_BYTES = 1, 1_000, 2_000
# A deployment's nested-stack resource (its parameters and dependencies, and its name, which
# appears in its logical id and path) and an exposed deployment's output.
_DEPLOYMENT_RESOURCES = 1
_DEPLOYMENT_BYTES = 1_900
_DEPLOYMENT_BYTES_PER_NAME_CHARACTER = 12
_ROUTE_OUTPUT_BYTES = 700

# How CDK sizes and packs a role's policy statements (aws-iam: PolicyStatement._estimateSize,
# mergeStatements, Role.splitLargePolicy): a token counts as an ARN of 150 characters,
# statements merge up to 2,000 characters, the inline policy keeps statements while it stays
# under 10,000 and the rest go, first fit, into managed policies of up to 6,000.
_ARN_ESTIMATE = 150
_MAX_MERGE_SIZE = 2_000
_MAX_INLINE_SIZE = 10_000
_MAX_MANAGED_POLICY_SIZE = 6_000
# The Mountpoint role's inline policy, once it holds a statement.
_MOUNTPOINT_POLICY_BYTES = 600
# Template bytes per prefix granted (its two statements) and per managed policy.
_MOUNTPOINT_PREFIX_BYTES = 450
_MANAGED_POLICY_BYTES = 900


def parent_stack_use(
    node_pools: Sequence[NodePool],
    node_provisioning: NodeProvisioning,
    deployments: Sequence[ModelDeploymentSpec],
    endpoint: Endpoint | None,
    routes: Mapping[str, Route],
    splits: Sequence[SplitRoute],
) -> ParentStackUse:
    """The parent stack's resources, outputs and template size for these parts of a platform.

    ``routes`` are the exposed deployments' routes by deployment name (empty without an
    endpoint), ``splits`` the endpoint's traffic splits.
    """
    resources, outputs, size = _CORE_RESOURCES, _CORE_OUTPUTS, _CORE_BYTES
    urls = base_url_outputs(routes, splits)
    if node_provisioning.uses_karpenter:
        resources += _KARPENTER_RESOURCES
        size += _KARPENTER_BYTES
    present = {pool.accelerator for pool in node_pools}
    for accelerator, (addon_resources, addon_bytes) in _ACCELERATOR_ADDONS.items():
        if accelerator in present:
            resources += addon_resources
            size += addon_bytes
    if endpoint is not None:
        resources += _ENDPOINT_RESOURCES
        size += _ENDPOINT_BYTES
        if endpoint.authentication == "api_key":
            resources += _API_KEY_RESOURCES
            size += _API_KEY_BYTES
            # The command printing the key is an output beside the base URLs, if any.
            outputs += _API_KEY_OUTPUTS if routes else 0
        if any(url.route.host is None for url in urls):
            resources += _HOST_LOOKUP_RESOURCES
            size += _HOST_LOOKUP_BYTES
        if splits:
            resources += _SPLITS_RESOURCES
            size += _SPLITS_BYTES + len(splits) * _SPLIT_BYTES

    if any(spec.routing is not None and spec.routing.picks for spec in deployments):
        resources += _INFERENCE_EXTENSION_RESOURCES
        size += _INFERENCE_EXTENSION_BYTES
    pools = _node_pools_use(node_pools, node_provisioning)
    prefixes = mounted_prefixes(deployments)
    overflow = mountpoint_overflow_policies(prefixes)
    grants = (1 if prefixes else 0) + overflow
    deployments_use = StackUse(
        resources=len(deployments) * _DEPLOYMENT_RESOURCES + grants,
        outputs=len(urls),
        template_bytes=sum(
            _DEPLOYMENT_BYTES + _DEPLOYMENT_BYTES_PER_NAME_CHARACTER * len(spec.name)
            for spec in deployments
        )
        + len(urls) * _ROUTE_OUTPUT_BYTES
        + (_MOUNTPOINT_POLICY_BYTES if prefixes else 0)
        + len(prefixes) * _MOUNTPOINT_PREFIX_BYTES
        + overflow * _MANAGED_POLICY_BYTES,
    )
    total = StackUse(
        resources=resources + pools.resources + deployments_use.resources,
        outputs=outputs + deployments_use.outputs,
        template_bytes=size + pools.template_bytes + deployments_use.template_bytes,
    )
    return ParentStackUse(
        total=total,
        node_pools=pools,
        deployments=deployments_use,
        per_node_pool=StackUse(
            resources=0 if node_provisioning.uses_karpenter else _NODE_GROUP_RESOURCES,
            outputs=0,
            template_bytes=_KARPENTER_POOL_BYTES
            if node_provisioning.uses_karpenter
            else _NODE_GROUP_BYTES,
        ),
        per_deployment=StackUse(
            resources=_DEPLOYMENT_RESOURCES, outputs=1, template_bytes=_DEPLOYMENT_BYTES
        ),
    )


def _node_pools_use(
    node_pools: Sequence[NodePool], node_provisioning: NodeProvisioning
) -> StackUse:
    """Managed node groups for every pool, or for the system pool alone with Karpenter."""
    system = system_pool_of(node_pools)
    resources = size = 0
    for pool in node_pools:
        if not node_provisioning.manages(pool, system):
            size += _KARPENTER_POOL_BYTES
            continue
        resources += _NODE_GROUP_RESOURCES
        accelerated = pool.accelerator is not Accelerator.NONE
        size += _NODE_GROUP_ACCELERATOR_BYTES if accelerated else _NODE_GROUP_BYTES
    return StackUse(resources=resources, outputs=0, template_bytes=size)


def mounted_prefixes(deployments: Iterable[ModelDeploymentSpec]) -> list[str]:
    """The bucket prefixes the Mountpoint driver is granted, in grant order, each once: the
    weights of deployments loading through Mountpoint, compiled Neuron artifacts, and what
    else an engine with a model repository mounts
    (:class:`~eks_inference.specification.capabilities.ServesModelRepository`), and the
    prefix of LoRA adapters an engine serves
    (:class:`~eks_inference.specification.capabilities.ServesAdapters`)."""
    prefixes: dict[str, None] = {}
    for spec in deployments:
        if spec.weights.loader == "mountpoint":
            prefixes.setdefault(spec.weights.prefix)
        if spec.has_compiled_artifacts:
            prefixes.setdefault(artifact_prefix(spec))
        repository = engine_of(spec).capability(ServesModelRepository)
        for prefix in repository.mounted_prefixes(spec) if repository is not None else ():
            prefixes.setdefault(prefix)
        if spec.adapters is not None and engine_of(spec).serves(ServesAdapters, spec):
            prefixes.setdefault(spec.adapters.prefix)
    return list(prefixes)


def mountpoint_overflow_policies(prefixes: Sequence[str]) -> int:
    """Managed policies CDK splits off the Mountpoint role's policy for these grants.

    Each prefix is an ``s3:ListBucket`` statement with its own ``s3:prefix`` condition (never
    merged) and an ``s3:GetObject`` resource; the ``GetObject`` statements merge while they
    stay under the merge size. Statements then fill the inline policy in order and the rest go
    first fit into managed policies, as CDK packs them.
    """
    statements: list[int] = []
    reads: list[int] = []  # the merged GetObject statements: (index in statements, size)
    base = len('"Effect": "Allow",')
    for prefix in prefixes:
        condition = {"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}}
        statements.append(
            base
            + _field_size("Action", [len("s3:ListBucket")])
            + _field_size("Resource", [_ARN_ESTIMATE])
            + len(json.dumps(condition, separators=(",", ":")))
        )
        merged = next(
            (i for i in reads if statements[i] + _ARN_ESTIMATE + 3 <= _MAX_MERGE_SIZE),
            None,
        )
        if merged is None:
            reads.append(len(statements))
            statements.append(
                base
                + _field_size("Action", [len("s3:GetObject")])
                + _field_size("Resource", [_ARN_ESTIMATE])
            )
        else:
            statements[merged] += _ARN_ESTIMATE + 3
    inline = 0
    managed: list[int] = []
    for size in statements:
        if inline + size < _MAX_INLINE_SIZE:
            inline += size
            continue
        for i, used in enumerate(managed):
            if used + size <= _MAX_MANAGED_POLICY_SIZE:
                managed[i] += size
                break
        else:
            managed.append(size)
    return len(managed)


def _field_size(key: str, value_sizes: Sequence[int]) -> int:
    """CDK's estimate of a statement field: its key, quotes and separators, and each value."""
    return len(key) + 5 + sum(size + 3 for size in value_sizes)
