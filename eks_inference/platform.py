"""``PlatformSpec``: the cluster's node pools, its model bucket and the deployments it serves.

Rules that span deployments live here: a deployment's instance type must be offered by exactly
one node pool, deployments sharing a pool must fit in its ``max_size`` (rollouts included), and
Ray heads need a CPU pool. A :class:`Placement` tells the charts which pool each pod goes to,
so selectors and tolerations are always taken from a pool that exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from eks_inference import sizing
from eks_inference.aws_types import AccountId, Region, bucket_name_problem
from eks_inference.catalog import Accelerator
from eks_inference.node_pools import NodePool
from eks_inference.spec import ModelDeploymentSpec
from eks_inference.validation import Problems
from eks_inference.versions import KUBERNETES_VERSION


@dataclass(frozen=True)
class Placement:
    """Where a deployment's pods run: model servers on ``workers``, Ray heads on ``head``."""

    workers: NodePool
    head: NodePool


class PlatformSpec(BaseModel):
    """Everything the reference app (or yours) deploys, loadable from YAML.

    ``model_bucket_name`` is explicit rather than generated so that the manifests written to
    ``k8s_manifests/`` name the same bucket the CloudFormation template creates. ``region``
    fills the Mountpoint mount options (pods then need no instance metadata to find it).
    ``account_id`` is used only to write the registry of images the CDK app builds (the Neuron
    Ray image) into ``k8s_manifests/``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_name: str = Field(default="eks-inference", pattern=r"^[a-zA-Z][-a-zA-Z0-9]{0,99}$")
    region: Region = "us-east-1"
    account_id: AccountId | None = Field(
        default=None,
        description="Account the manifests in k8s_manifests/ name images in (container assets); "
        "synth itself stays environment-agnostic.",
    )
    kubernetes_version: str = KUBERNETES_VERSION
    model_bucket_name: str
    node_pools: tuple[NodePool, ...] = Field(min_length=1)
    deployments: tuple[ModelDeploymentSpec, ...] = ()

    @classmethod
    def from_yaml(cls, path: str | Path) -> PlatformSpec:
        return cls.model_validate(yaml.safe_load(Path(path).read_text()))

    @property
    def system_pool(self) -> NodePool:
        """The first CPU pool: system add-ons and Ray heads run there."""
        return next(p for p in self.node_pools if p.accelerator is Accelerator.NONE)

    def pool_for(self, deployment: ModelDeploymentSpec) -> NodePool:
        return next(p for p in self.node_pools if deployment.instance_type in p.instance_types)

    def placement(self, deployment: ModelDeploymentSpec) -> Placement:
        return Placement(workers=self.pool_for(deployment), head=self.system_pool)

    def deployment(self, name: str) -> ModelDeploymentSpec:
        for d in self.deployments:
            if d.name == name:
                return d
        raise KeyError(f"no deployment {name!r}; known: {[d.name for d in self.deployments]}")

    @model_validator(mode="after")
    def _check_platform(self) -> PlatformSpec:
        problems = Problems("PlatformSpec")
        bucket_problem = bucket_name_problem(self.model_bucket_name)
        if bucket_problem is not None:
            problems.add(("model_bucket_name",), bucket_problem, self.model_bucket_name)
        _check_unique(problems, "node_pools", [p.name for p in self.node_pools])
        _check_unique(problems, "deployments", [d.name for d in self.deployments])
        if not any(p.accelerator is Accelerator.NONE for p in self.node_pools):
            problems.add(
                ("node_pools",),
                "add a CPU pool (e.g. instance_types: [m6i.2xlarge]): system add-ons and Ray "
                "heads must not run on accelerator nodes",
            )
        nodes_per_pool: dict[str, int] = {}
        for i, deployment in enumerate(self.deployments):
            pools = [p for p in self.node_pools if deployment.instance_type in p.instance_types]
            if len(pools) != 1:
                offered = sorted({t for p in self.node_pools for t in p.instance_types})
                problems.add(
                    ("deployments", i, "instance_type"),
                    f"{len(pools)} node pools offer {deployment.instance_type}; exactly one "
                    f"must (pools offer {', '.join(offered)}): add a pool for it or choose "
                    "an offered type",
                    deployment.instance_type,
                )
                continue
            nodes_per_pool[pools[0].name] = (
                nodes_per_pool.get(pools[0].name, 0) + deployment.nodes_during_rollout
            )
        for i, deployment in enumerate(self.deployments):
            _check_compile_disk(problems, i, deployment, self.node_pools)
        for j, pool in enumerate(self.node_pools):
            needed = nodes_per_pool.get(pool.name, 0)
            if needed > pool.max_size:
                users = [d.name for d in self.deployments if d.instance_type in pool.instance_types]
                problems.add(
                    ("node_pools", j, "max_size"),
                    f"deployments {users} need up to {needed} {pool.instance.name} nodes at "
                    "max_replicas during a rollout (one surge pod per vLLM Deployment, a new "
                    f"Ray cluster at min_replicas per RayService), but pool {pool.name!r} has "
                    f"max_size {pool.max_size}; set "
                    f"max_size >= {needed} or lower their max_replicas",
                    pool.max_size,
                )
        problems.raise_if_any()
        return self


def _check_compile_disk(
    problems: Problems, index: int, deployment: ModelDeploymentSpec, pools: tuple[NodePool, ...]
) -> None:
    """A Neuron compile job must fit on the root volume beside the images it runs."""
    if not deployment.on_neuron or deployment.neuron_options.compiled_artifacts_prefix is None:
        return
    for j, pool in enumerate(pools):
        if deployment.instance_type not in pool.instance_types:
            continue
        needed = sizing.compile_disk_gib(deployment.model.architecture)
        disk = needed + sizing.NODE_IMAGE_AND_SYSTEM_GIB
        if pool.root_volume_gib < disk:
            problems.add(
                ("node_pools", j, "disk_size_gib"),
                f"the compile job of {deployment.name!r} (deployments.{index}) needs {needed} "
                f"GiB of local disk beside the images, but pool {pool.name!r} has "
                f"{pool.root_volume_gib} GiB root volumes; set disk_size_gib >= {disk}",
                pool.disk_size_gib,
            )


def _check_unique(problems: Problems, field: str, names: list[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            problems.add((field, i, "name"), f"name {name!r} is used twice; names are unique")
        seen.add(name)
