"""The Mountpoint for S3 CSI driver, which mounts model bucket prefixes as volumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from constructs import Construct, IConstruct

from eks_inference import names, versions
from eks_inference.constructs.addons.registry import PlatformAddons, Provides
from eks_inference.constructs.eks_addon import AddonRole, EksAddon
from eks_inference.constructs.model_bucket import ModelBucket

# The role is created beside the add-on, in the same scope, under this id.
ROLE_ID = "MountpointRole"


@dataclass(frozen=True)
class MountpointS3CsiOptions:
    """How :class:`MountpointS3Csi` is installed."""

    addon_version: str = versions.MOUNTPOINT_S3_CSI_ADDON_VERSION
    """Default ``versions.MOUNTPOINT_S3_CSI_ADDON_VERSION``: the EKS add-on version whose
    mount options the charts' PersistentVolumes use."""


class MountpointS3Csi(EksAddon):
    """The Mountpoint for S3 CSI driver (EKS add-on) and its role, which reads by prefix only.

    The role (:attr:`role`, ``MountpointRole`` beside the add-on in ``scope``) is given to the
    driver's service account through the add-on's Pod Identity association; the add-on waits
    for the Pod Identity agent. The driver mounts every Mountpoint volume of the cluster with
    that one role, so it starts with no permission at all and is granted, prefix by prefix,
    what the deployments' volumes mount (:meth:`grant_read`): a ``ListBucket`` limited to the
    prefix and ``GetObject`` under it, never a write. The serving pods that read through it
    get no AWS credentials.
    """

    PROVIDES: ClassVar[Provides] = Provides(mountpoint=True)

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        platform: PlatformAddons,
        model_bucket: ModelBucket,
        options: MountpointS3CsiOptions | None = None,
    ) -> None:
        options = options or MountpointS3CsiOptions()
        cluster = platform.cluster
        super().__init__(
            scope,
            construct_id,
            cluster=cluster,
            addon_name="aws-mountpoint-s3-csi-driver",
            addon_version=options.addon_version,
            role=AddonRole(
                ROLE_ID,
                names.MOUNTPOINT_SERVICE_ACCOUNT,
                description=(
                    f"Mountpoint for S3 CSI driver of EKS cluster {cluster.cluster_name}: reads "
                    "model bucket prefixes"
                ),
            ),
        )
        self._model_bucket = model_bucket
        self._prefixes: set[str] = set()
        platform.set_mountpoint(self)

    def grant_read(self, prefix: str) -> None:
        """Let the driver read ``prefix`` of the model bucket (idempotent)."""
        if prefix in self._prefixes:
            return
        self._prefixes.add(prefix)
        self._model_bucket.grant_read_prefix(self.role, prefix)

    @property
    def dependencies(self) -> tuple[IConstruct, ...]:
        """What a Mountpoint volume must be applied after: the driver and its role's policy."""
        return (self, self.role)
