"""``EksAddon``: an EKS managed add-on of the cluster, with its own Pod Identity role.

The cluster installs the VPC CNI this way, and the add-ons that are EKS managed add-ons (the
Pod Identity agent, the Mountpoint for S3 CSI driver) do too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

if TYPE_CHECKING:
    from eks_inference.constructs.cluster import InferenceCluster


class EksAddon(eks.Addon):
    """An EKS managed add-on of an :class:`InferenceCluster`, removed with the stack.

    With ``identity`` (a role and the add-on's service account) the add-on's own Pod Identity
    association gives the role to that account, and the add-on waits for the cluster's Pod
    Identity agent: ``eks.Addon`` has no property for it, its CloudFormation resource has.
    ``overwrite`` takes over an installation EKS made itself (the VPC CNI).
    ``configuration_values`` are the add-on's own settings (its configuration schema). The
    add-on is deleted with the stack (``preserve_on_delete=False``): it holds no data.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: InferenceCluster,
        addon_name: str,
        addon_version: str,
        identity: tuple[iam.IRole, str] | None = None,
        overwrite: bool = False,
        configuration_values: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            cluster=cluster.eks_cluster,
            addon_name=addon_name,
            addon_version=addon_version,
            configuration_values=configuration_values,
            preserve_on_delete=False,
        )
        if identity is None and not overwrite:
            return
        cfn_addon = self.node.default_child
        if not isinstance(cfn_addon, eks.CfnAddon):
            raise TypeError(f"unexpected default child of eks.Addon: {cfn_addon!r}")
        if overwrite:
            cfn_addon.resolve_conflicts = "OVERWRITE"
        if identity is not None:
            role, service_account = identity
            cfn_addon.pod_identity_associations = [
                eks.CfnAddon.PodIdentityAssociationProperty(
                    role_arn=role.role_arn, service_account=service_account
                )
            ]
            self.node.add_dependency(cluster.pod_identity_agent)
