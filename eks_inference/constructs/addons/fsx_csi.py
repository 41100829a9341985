"""The FSx for Lustre CSI driver, which mounts the deployments' FSx file systems as volumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from constructs import Construct
from jsii import JSIIAbstractClass

from eks_inference import names, versions
from eks_inference.constructs.addons.addon import PlatformAddon
from eks_inference.constructs.addons.registry import PlatformAddons, Provides
from eks_inference.constructs.eks_addon import AddonRole, EksAddon

# The role is created beside the add-on, in the same scope, under this id.
ROLE_ID = "FsxCsiRole"


@dataclass(frozen=True)
class FsxCsiDriverOptions:
    """How :class:`FsxCsiDriver` is installed."""

    addon_version: str = versions.FSX_CSI_ADDON_VERSION
    """Default ``versions.FSX_CSI_ADDON_VERSION``: the driver release whose static
    provisioning volume attributes (``dnsname``, ``mountname``) the charts' volumes use."""


class FsxCsiDriver(PlatformAddon[FsxCsiDriverOptions], EksAddon, metaclass=JSIIAbstractClass):
    """The FSx for Lustre CSI driver (EKS add-on ``aws-fsx-csi-driver``) on a role of its own.

    The library provisions FSx volumes statically: the stack creates each file system (or you
    import one) and the charts write its PersistentVolume. The driver's node plugin then
    mounts it with the Lustre client, over the network, with no AWS call; only the
    controller's dynamic provisioning and resizing call the FSx API, and nothing here asks it
    to. So its role (:attr:`role`, ``FsxCsiRole`` beside the add-on in ``scope``), given to
    the controller's service account through the add-on's Pod Identity association, is
    granted nothing: the controller can never create, change or delete a file system, and it
    never falls back to the node role (the nodes' instance metadata is out of pods' reach).
    Create it when a deployment reads ``weights.loader: fsx``
    (:class:`~eks_inference.stacks.InferenceStack` does).
    """

    OPTIONS = FsxCsiDriverOptions
    PROVIDES: ClassVar[Provides] = Provides(lustre=True)

    def _build(
        self,
        scope: Construct,
        construct_id: str,
        platform: PlatformAddons,
        options: FsxCsiDriverOptions,
    ) -> None:
        cluster = platform.cluster
        EksAddon.__init__(
            self,
            scope,
            construct_id,
            cluster=cluster,
            addon_name="aws-fsx-csi-driver",
            addon_version=options.addon_version,
            role=AddonRole(
                ROLE_ID,
                names.FSX_CSI_SERVICE_ACCOUNT,
                description=(
                    f"FSx for Lustre CSI driver of EKS cluster {cluster.cluster_name}: static "
                    "volumes only, no FSx API access"
                ),
            ),
        )
        platform.set_lustre(self)
