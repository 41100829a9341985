"""``EksAddon``: an EKS managed add-on of the cluster, with its own Pod Identity role.

The cluster installs the VPC CNI this way, and the add-ons that are EKS managed add-ons (the
Pod Identity agent, the Mountpoint for S3 CSI driver, the FSx for Lustre and EBS CSI drivers)
do too. An add-on reads what it needs of its cluster through :class:`AddonCluster`, which
:class:`~eks_inference.constructs.cluster.InferenceCluster` is: the cluster installs its own
add-ons with this module, and this module never imports the cluster's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct


class AddonCluster(Protocol):
    """What an :class:`EksAddon` needs of the cluster it is installed on."""

    @property
    def eks_cluster(self) -> eks.ICluster:
        """The EKS cluster the add-on is installed on."""

    @property
    def pods_principal(self) -> iam.IPrincipal:
        """What an add-on's role trusts: Pod Identity acting for this cluster's pods only."""

    @property
    def pod_identity_agent(self) -> IConstruct:
        """The Pod Identity agent, which an add-on with a role waits for."""


@dataclass(frozen=True)
class AddonRole:
    """The IAM role an :class:`EksAddon` gives its service account through Pod Identity.

    The add-on creates the role beside itself (in the same scope, under :attr:`construct_id`),
    trusting the cluster's pods only (:attr:`AddonCluster.pods_principal`).
    """

    construct_id: str
    """The role's construct id, beside the add-on's."""
    service_account: str
    """The add-on's service account (in its own namespace), which gets the role."""
    description: str
    """The role's IAM description."""
    managed_policy: str | None = None
    """Default ``None``, no policy: the AWS managed policy the add-on's documentation gives
    it, if it calls AWS at all; grant anything narrower on :attr:`EksAddon.role`."""


class EksAddon(eks.Addon):
    """An EKS managed add-on of an :class:`AddonCluster`, removed with the stack.

    With ``role`` the add-on's own Pod Identity association gives the role (:attr:`role`) to
    its service account, and the add-on waits for the cluster's Pod Identity agent:
    ``eks.Addon`` has no property for it, its CloudFormation resource has. ``overwrite``
    takes over an installation EKS made itself (the VPC CNI). ``configuration_values`` are
    the add-on's own settings (its configuration schema). The add-on is deleted with the
    stack (``preserve_on_delete=False``): it holds no data.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: AddonCluster,
        addon_name: str,
        addon_version: str,
        role: AddonRole | None = None,
        overwrite: bool = False,
        configuration_values: Mapping[str, str] | None = None,
    ) -> None:
        # A sibling of the add-on in ``scope`` (not its child), created before it.
        created = None if role is None else _role(scope, role, cluster.pods_principal)
        super().__init__(
            scope,
            construct_id,
            cluster=cluster.eks_cluster,
            addon_name=addon_name,
            addon_version=addon_version,
            configuration_values=configuration_values,
            preserve_on_delete=False,
        )
        self._role = created
        self._resource: eks.CfnAddon | None = None
        if role is None and not overwrite:
            return
        cfn_addon = self.resource
        if overwrite:
            cfn_addon.resolve_conflicts = "OVERWRITE"
        if role is not None:
            cfn_addon.pod_identity_associations = [
                eks.CfnAddon.PodIdentityAssociationProperty(
                    role_arn=self.role.role_arn, service_account=role.service_account
                )
            ]
            self.node.add_dependency(cluster.pod_identity_agent)

    @property
    def resource(self) -> eks.CfnAddon:
        """The add-on's CloudFormation resource, asked of Node.js once: a resource depends on
        it in one request, where depending on the add-on's construct takes two."""
        if self._resource is None:
            resource = self.node.default_child
            if not isinstance(resource, eks.CfnAddon):
                raise TypeError(f"unexpected default child of eks.Addon: {resource!r}")
            self._resource = resource
        return self._resource

    @property
    def role(self) -> iam.Role:
        """The role of the add-on's service account; ``AttributeError`` on an add-on made
        without ``role``."""
        if self._role is None:
            raise AttributeError(f"the EKS add-on {self.node.path} has no role of its own")
        return self._role


def _role(scope: Construct, role: AddonRole, principal: iam.IPrincipal) -> iam.Role:
    return iam.Role(
        scope,
        role.construct_id,
        assumed_by=principal,
        description=role.description,
        managed_policies=(
            None
            if role.managed_policy is None
            else [iam.ManagedPolicy.from_aws_managed_policy_name(role.managed_policy)]
        ),
    )
