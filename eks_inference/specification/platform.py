"""``PlatformSpec``: the cluster's node pools, its model bucket and the deployments it serves.

Rules that span deployments live here: a deployment's instance type must be offered by exactly
one node pool, deployments sharing a pool must fit in its ``max_size`` (rollouts included), and
Ray heads need a CPU pool. A :class:`Placement` tells the charts which pool each pod goes to,
so selectors and tolerations are always taken from a pool that exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    field_validator,
    model_validator,
)

from eks_inference import versions
from eks_inference.catalog import Accelerator, sizing
from eks_inference.names import MAX_ROLE_NAME_LENGTH, karpenter_node_role_name
from eks_inference.specification import cloudformation_limits
from eks_inference.specification import files as spec_file
from eks_inference.specification.aws_types import AccountId, BucketName, Region
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.endpoints import Endpoint
from eks_inference.specification.kv_transfer_rules import spanning_pool_problems
from eks_inference.specification.multi_node_rules import chosen_efa, group_pool_problems
from eks_inference.specification.node_pools import (
    NodePool,
    managed_node_group_problems,
    system_pool_of,
)
from eks_inference.specification.numa import chosen_policy, chosen_policy_note, numa_problems
from eks_inference.specification.provisioning import NodeProvisioning
from eks_inference.specification.routes import (
    Route,
    SplitRoute,
    check_routes,
    resolve_routes,
    resolve_splits,
)
from eks_inference.specification.validation import (
    Problems,
    Rule,
    SpecError,
    SpecModel,
    rule_error,
    validate_with_rules,
)
from eks_inference.specification.weights_rules import lustre_zone_problems


@dataclass(frozen=True)
class Placement:
    """Where a deployment's pods run: model servers on ``workers``, Ray heads on ``head``."""

    workers: NodePool
    head: NodePool


class PlatformSpec(SpecModel):
    """Everything the reference app (or yours) deploys, loadable from YAML.

    ``model_bucket_name`` is explicit rather than generated so that the manifests written to
    ``k8s_manifests/`` name the same bucket the CloudFormation template creates. ``region``
    fills the Mountpoint mount options (pods then need no instance metadata to find it).
    ``account_id`` is used only to write the registry of images the CDK app builds (the Neuron
    Ray image) into ``k8s_manifests/``. ``endpoint`` is the load balancer that exposes the
    deployments
    (:class:`~eks_inference.specification.endpoints.Endpoint`); without it they are reachable only
    inside the cluster.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_name: str = Field(default="eks-inference", pattern=r"^[a-zA-Z][-a-zA-Z0-9]{0,99}$")
    region: Region = "us-east-1"
    account_id: AccountId | None = Field(
        default=None,
        description="Account the manifests in k8s_manifests/ name images in (container assets); "
        "synth itself stays environment-agnostic.",
    )
    kubernetes_version: str = Field(
        default=versions.KUBERNETES_VERSION,
        description="Kubernetes minor version of the cluster; one of those "
        "eks_inference.versions.KUBERNETES_RELEASES pins a kubectl layer and add-on images for.",
    )
    model_bucket_name: BucketName
    node_pools: tuple[NodePool, ...] = Field(min_length=1)
    node_provisioning: NodeProvisioning = Field(
        default=NodeProvisioning.MANAGED,
        description="managed: a managed node group per pool, scaled by the Cluster Autoscaler; "
        "karpenter: Karpenter launches every pool's nodes but the system pool's, which stays a "
        "managed node group.",
    )
    deployments: tuple[ModelDeploymentSpec, ...] = ()
    endpoint: Endpoint | None = Field(
        default=None,
        description="The load balancer exposing the deployments' OpenAI APIs; none: in-cluster "
        "Services only.",
    )

    @classmethod
    def from_yaml(cls, path: str | Path) -> PlatformSpec:
        """Load a platform file, read within the bounds of :mod:`eks_inference.specification.files`.

        Raises :class:`~eks_inference.specification.files.SpecFileError` for a file that is not
        bounded, duplicate-free YAML, :class:`~eks_inference.specification.validation.SpecError`
        (a ``ValidationError``) for a spec that breaks a rule, ``OSError`` when the file cannot
        be read.
        """
        try:
            return cls.model_validate(spec_file.load(path))
        except ValidationError as error:
            raise SpecError.of(error) from None

    @property
    def system_pool(self) -> NodePool:
        """The first CPU pool: system add-ons and Ray heads run there."""
        return system_pool_of(self.node_pools)

    def with_node_provisioning(self, node_provisioning: NodeProvisioning) -> PlatformSpec:
        """This platform with its nodes provisioned by ``node_provisioning``, validated again
        (the rules of each mode differ); :class:`~eks_inference.specification.validation.SpecError`
        when it breaks them."""
        data = self.model_dump(mode="json", exclude_unset=True)
        data["node_provisioning"] = node_provisioning
        return type(self)(**data)

    def topology_policy_notes(self) -> tuple[str, ...]:
        """What ``plan`` says of each pool's topology manager policy the platform chose for
        the replicas it hosts, and what it costs
        (:func:`~eks_inference.specification.numa.chosen_policy`); none for pools on their
        family's policy or their own."""
        notes = (
            chosen_policy_note(pool, hosted)
            for pool, hosted in zip(self.node_pools, _hosted(self), strict=True)
        )
        return tuple(note for note in notes if note is not None)

    def pool_for(self, deployment: ModelDeploymentSpec) -> NodePool:
        return next(p for p in self.node_pools if deployment.instance_type in p.instance_types)

    def placement(self, deployment: ModelDeploymentSpec) -> Placement:
        return Placement(workers=self.pool_for(deployment), head=self.system_pool)

    def routes(self) -> dict[str, Route]:
        """Where each exposed deployment is reached, by deployment name (empty: no endpoint)."""
        return resolve_routes(self.cluster_name, self.endpoint, self.deployments)

    def splits(self) -> list[SplitRoute]:
        """Where each traffic split of the endpoint is reached, and its targets' routes."""
        return resolve_splits(self.endpoint, self.routes())

    def route(self, deployment: ModelDeploymentSpec) -> Route | None:
        """Where ``deployment`` is reached on the load balancer, or ``None`` if it is not."""
        return self.routes().get(deployment.name)

    def deployment(self, name: str) -> ModelDeploymentSpec:
        for d in self.deployments:
            if d.name == name:
                return d
        raise KeyError(f"no deployment {name!r}; known: {[d.name for d in self.deployments]}")

    @field_validator("kubernetes_version")
    @classmethod
    def _check_kubernetes_version(cls, version: str) -> str:
        """Refuse a version the library pins no kubectl layer and add-on images for.

        Without this, an unsupported version passed ``plan`` and ``manifests`` and failed only
        when the cluster was built at synth.
        """
        if version not in versions.KUBERNETES_RELEASES:
            supported = ", ".join(sorted(versions.KUBERNETES_RELEASES))
            raise rule_error(f"Kubernetes {version} is not supported; use one of {supported}")
        return version

    @field_validator("node_pools")
    @classmethod
    def _check_pools(cls, pools: tuple[NodePool, ...]) -> tuple[NodePool, ...]:
        problems = Problems("PlatformSpec")
        _check_unique(problems, [p.name for p in pools])
        if not any(p.accelerator is Accelerator.NONE for p in pools):
            problems.add(
                (),
                "add a CPU pool (e.g. instance_types: [m6i.2xlarge]): system add-ons and Ray "
                "heads must not run on accelerator nodes",
            )
        problems.raise_if_any()
        return pools

    @field_validator("deployments", mode="before")
    @classmethod
    def _check_deployment_count(cls, deployments: Any) -> Any:
        """At most one stack's worth of deployments, counted before any is validated.

        Each deployment is at least one resource of the parent stack (its nested stack), so
        more than CloudFormation's resources per stack can never deploy; refusing them first
        keeps a file of thousands of broken deployments as fast to reject as any other.
        """
        if isinstance(deployments, list | tuple) and (
            len(deployments) > cloudformation_limits.MAX_RESOURCES
        ):
            problems = Problems("PlatformSpec")
            problems.add(
                (),
                f"{len(deployments)} deployments, but one stack holds at most "
                f"{cloudformation_limits.MAX_RESOURCES} (CloudFormation's resources per "
                "stack, one nested stack each); split them across platforms",
            )
            problems.raise_if_any()
        return deployments

    @field_validator("deployments")
    @classmethod
    def _check_deployment_names(
        cls, deployments: tuple[ModelDeploymentSpec, ...]
    ) -> tuple[ModelDeploymentSpec, ...]:
        problems = Problems("PlatformSpec")
        _check_unique(problems, [d.name for d in deployments])
        problems.raise_if_any()
        return deployments

    @model_validator(mode="wrap")
    @classmethod
    def _check_platform(
        cls, data: Any, handler: ModelWrapValidatorHandler[PlatformSpec]
    ) -> PlatformSpec:
        platform = validate_with_rules(cls, data, handler, _RULES)
        _choose_pool_defaults(platform)
        return platform


def _choose_pool_defaults(platform: PlatformSpec) -> None:
    """Give each pool the defaults its deployments decide, so that every reader of
    ``node_pools`` (node groups, Karpenter's node classes, the device plugins, the pods, the
    plan) sees what its nodes run: the topology manager policy they need
    (:func:`~eks_inference.specification.numa.chosen_policy`) where the pool sets none, and
    EFA where it holds a multi-node deployment or a disaggregated one across nodes
    (:func:`~eks_inference.specification.multi_node_rules.chosen_efa`) and says nothing.

    Done once the platform has validated, before anyone holds it, on the model's own fields:
    a chosen value is a default, so it is left out of ``model_fields_set`` and a platform
    dumped without defaults and read again chooses it afresh.
    """
    pools = list(platform.node_pools)
    changed = False
    for j, hosted in enumerate(_hosted(platform)):
        chosen = {
            "topology_manager_policy": chosen_policy(pools[j], hosted),
            "efa": chosen_efa(pools[j], hosted),
        }
        chosen = {field: value for field, value in chosen.items() if value is not None}
        if chosen:
            pool = pools[j]
            values = {**pool.__dict__, **chosen}
            pools[j] = type(pool).model_construct(_fields_set=pool.model_fields_set, **values)
            changed = True
    if changed:
        platform.__dict__["node_pools"] = tuple(pools)


def _offering(platform: PlatformSpec) -> list[list[int]]:
    """For each deployment, the indexes of the pools offering its instance type.

    Found through one index of the pools' instance types, so that the rules placing
    deployments on pools take time in proportion to the pools plus the deployments, not
    their product.
    """
    by_type: dict[str, list[int]] = {}
    for j, pool in enumerate(platform.node_pools):
        for instance_type in dict.fromkeys(pool.instance_types):
            by_type.setdefault(instance_type, []).append(j)
    return [by_type.get(d.instance_type, []) for d in platform.deployments]


def _hosted(platform: PlatformSpec) -> list[list[ModelDeploymentSpec]]:
    """For each pool, the deployments whose instance type it offers, in deployment order."""
    hosted: list[list[ModelDeploymentSpec]] = [[] for _ in platform.node_pools]
    for deployment, pools in zip(platform.deployments, _offering(platform), strict=True):
        for j in pools:
            hosted[j].append(deployment)
    return hosted


def _check_placement(platform: PlatformSpec, problems: Problems) -> None:
    """One pool offers each deployment's instance type, and holds them all during rollouts."""
    nodes_per_pool = [0] * len(platform.node_pools)
    offered: str | None = None
    for i, (deployment, pools) in enumerate(
        zip(platform.deployments, _offering(platform), strict=True)
    ):
        if len(pools) != 1:
            if offered is None:
                types = {t for pool in platform.node_pools for t in pool.instance_types}
                offered = ", ".join(sorted(types))
            problems.add(
                ("deployments", i, "instance_type"),
                f"{len(pools)} node pools offer {deployment.instance_type}; exactly one "
                f"must (pools offer {offered}): add a pool for it or choose "
                "an offered type",
                deployment.instance_type,
            )
            continue
        nodes_per_pool[pools[0]] += deployment.nodes_during_rollout
    hosted = _hosted(platform)
    for j, pool in enumerate(platform.node_pools):
        needed = nodes_per_pool[j]
        if needed > pool.max_size:
            users = [d.name for d in hosted[j]]
            problems.add(
                ("node_pools", j, "max_size"),
                f"deployments {users} need up to {needed} {pool.instance.name} nodes at "
                "max_replicas during a rollout (one surge pod per vLLM Deployment, a new "
                f"Ray cluster at min_replicas per RayService), but pool {pool.name!r} has "
                f"max_size {pool.max_size}; set "
                f"max_size >= {needed} or lower their max_replicas",
                pool.max_size,
            )


def _check_compile_disks(platform: PlatformSpec, problems: Problems) -> None:
    """A Neuron compile job must fit on the root volume beside the images it runs."""
    for i, (deployment, pools) in enumerate(
        zip(platform.deployments, _offering(platform), strict=True)
    ):
        if not deployment.on_neuron or deployment.neuron_options.compiled_artifacts_prefix is None:
            continue
        for j in pools:
            pool = platform.node_pools[j]
            needed = sizing.compile_disk_gib(deployment.model.architecture)
            disk = needed + sizing.NODE_IMAGE_AND_SYSTEM_GIB
            if pool.root_volume_gib < disk:
                problems.add(
                    ("node_pools", j, "disk_size_gib"),
                    f"the compile job of {deployment.name!r} (deployments.{i}) needs {needed} "
                    f"GiB of local disk beside the images, but pool {pool.name!r} has "
                    f"{pool.root_volume_gib} GiB root volumes; set disk_size_gib >= {disk}",
                    pool.disk_size_gib,
                )


def _check_lustre_zones(platform: PlatformSpec, problems: Problems) -> None:
    """Deployments reading FSx for Lustre run in the one zone of their file system."""
    for deployment, pools in zip(platform.deployments, _offering(platform), strict=True):
        for j in pools:
            lustre_zone_problems(deployment, platform.node_pools[j], j, problems)


def _check_group_pools(platform: PlatformSpec, problems: Problems) -> None:
    """A multi-node deployment's groups run in one zone, over EFA where the nodes have it."""
    for deployment, pools in zip(platform.deployments, _offering(platform), strict=True):
        for j in pools:
            group_pool_problems(deployment, platform.node_pools[j], j, problems)


def _check_spanning_pools(platform: PlatformSpec, problems: Problems) -> None:
    """A disaggregated deployment whose KV cache crosses nodes has EFA between them."""
    for deployment, pools in zip(platform.deployments, _offering(platform), strict=True):
        for j in pools:
            spanning_pool_problems(deployment, platform.node_pools[j], j, problems)


def _check_numa(platform: PlatformSpec, problems: Problems) -> None:
    """Replicas sit on one NUMA node where their pool's topology policy demands it."""
    for i, (deployment, pools) in enumerate(
        zip(platform.deployments, _offering(platform), strict=True)
    ):
        for j in pools:
            numa_problems(deployment, i, platform.node_pools[j], j, problems)


def _check_node_provisioning(platform: PlatformSpec, problems: Problems) -> None:
    """Managed node groups take what they can; Karpenter needs a running system node."""
    provisioning = platform.node_provisioning
    system = platform.system_pool
    for j, pool in enumerate(platform.node_pools):
        if not provisioning.manages(pool, system):
            continue
        for field, message in managed_node_group_problems(pool).items():
            problems.add(("node_pools", j, field), message, getattr(pool, field))
    if not provisioning.uses_karpenter:
        return
    if system.min_size < 1:
        problems.add(
            ("node_pools", platform.node_pools.index(system), "min_size"),
            f"with node_provisioning: karpenter the system pool {system.name!r} runs Karpenter "
            "itself and nothing else starts its first node (there is no Cluster Autoscaler); "
            "set min_size >= 1 (2 for a highly available controller)",
            system.min_size,
        )
    role = karpenter_node_role_name(platform.cluster_name)
    if len(role) > MAX_ROLE_NAME_LENGTH:
        problems.add(
            ("cluster_name",),
            f"Karpenter's node role {role!r} would be longer than IAM's "
            f"{MAX_ROLE_NAME_LENGTH} characters; use a cluster name of at most "
            f"{MAX_ROLE_NAME_LENGTH - len(role) + len(platform.cluster_name)} characters",
            platform.cluster_name,
        )


def _check_routes(platform: PlatformSpec, problems: Problems) -> None:
    check_routes(platform.cluster_name, platform.endpoint, platform.deployments, problems)


def _check_cloudformation_limits(platform: PlatformSpec, problems: Problems) -> None:
    """The parent stack fits CloudFormation's quotas, or the list that grows it is named.

    Checked here so that ``plan`` and ``manifests`` refuse what synth or deploy would (CDK
    fails synth beyond 500 resources; CloudFormation refuses more outputs or a larger
    template), see :mod:`eks_inference.specification.cloudformation_limits`.
    """
    limits = cloudformation_limits
    use = limits.parent_stack_use(
        platform.node_pools,
        platform.node_provisioning,
        platform.deployments,
        platform.endpoint,
        platform.routes(),
        platform.splits(),
    )
    pools, deployments = len(platform.node_pools), len(platform.deployments)
    named: set[str] = set()
    for quota, limit in (
        ("resources", limits.MAX_RESOURCES),
        ("template_bytes", limits.MAX_TEMPLATE_BYTES),
    ):
        used = getattr(use.total, quota)
        by_pools, by_deployments = getattr(use.node_pools, quota), getattr(use.deployments, quota)
        field, count, share, per = (
            ("node_pools", pools, by_pools, getattr(use.per_node_pool, quota))
            if by_pools >= by_deployments
            else ("deployments", deployments, by_deployments, getattr(use.per_deployment, quota))
        )
        if used <= limit or field in named:
            continue
        named.add(field)
        allowed = max(0, count - -(-(used - limit) // per))
        if quota == "resources":
            amount = (
                f"stack would have {used:,} resources, over CloudFormation's {limit:,} per stack"
            )
            shares = f"{share:,} of them"
        else:
            amount = (
                f"stack template would be about {used // 1000:,} KB, over CloudFormation's "
                f"{limit // 1000:,} KB per template"
            )
            shares = f"{share // 1000:,} KB of it"
        karpenter = (
            " (or node_provisioning: karpenter, whose pools are no stack resources)"
            if field == "node_pools" and quota == "resources"
            else ""
        )
        problems.add(
            (field,),
            f"the {amount}; its {count} {field.replace('_', ' ')} make {shares}: use at "
            f"most {allowed}{karpenter}, or split them over two platforms",
        )
    if use.total.outputs > limits.MAX_OUTPUTS:
        over = use.total.outputs - limits.MAX_OUTPUTS
        problems.add(
            ("deployments",),
            f"the stack would have {use.total.outputs} outputs, {use.deployments.outputs} of "
            "them base URLs (one per exposed deployment and per traffic split), over "
            f"CloudFormation's {limits.MAX_OUTPUTS} per stack; expose {over} fewer "
            "deployments, or remove splits",
        )


def _check_unique(problems: Problems, names: list[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            problems.add((i, "name"), f"name {name!r} is used twice; names are unique")
        seen.add(name)


# The rules across fields; the rules of one field are its validators, above.
_RULES = (
    Rule(frozenset({"node_pools", "deployments"}), _check_placement),
    Rule(frozenset({"node_pools", "deployments"}), _check_compile_disks),
    Rule(frozenset({"node_pools", "deployments"}), _check_lustre_zones),
    Rule(frozenset({"node_pools", "deployments"}), _check_numa),
    Rule(frozenset({"node_pools", "deployments"}), _check_group_pools),
    Rule(frozenset({"node_pools", "deployments"}), _check_spanning_pools),
    Rule(frozenset({"cluster_name", "endpoint", "deployments"}), _check_routes),
    Rule(frozenset({"cluster_name", "node_pools", "node_provisioning"}), _check_node_provisioning),
    Rule(
        frozenset({"cluster_name", "node_pools", "node_provisioning", "deployments", "endpoint"}),
        _check_cloudformation_limits,
    ),
)
