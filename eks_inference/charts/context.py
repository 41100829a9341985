"""The render context: what the charts need from outside a deployment spec.

Charts receive a validated :class:`~eks_inference.specification.deployment.ModelDeploymentSpec`, a
:class:`~eks_inference.specification.platform.Placement` and a :class:`RenderContext`. Values that
come from outside the spec (the bucket, the region, the registry of an image the CDK app builds)
arrive in the context as strings that may be unresolved CDK tokens, so charts only ever embed
them in larger strings, never parse, hash or compare them.
"""

from __future__ import annotations

from dataclasses import dataclass

from eks_inference.names import VPC_CIDR


class MissingFileSystemError(ValueError):
    """A deployment reads FSx for Lustre, but its file system is not known when rendering."""


@dataclass(frozen=True)
class LustreMount:
    """What a PersistentVolume needs of an FSx for Lustre file system to mount it.

    ``file_system_id`` is the volume handle, ``dns_name`` and ``mount_name`` the volume
    attributes ``dnsname`` and ``mountname`` of the FSx CSI driver (its static provisioning
    example at the pinned version), ``capacity_gib`` the volume's capacity. The CDK side
    passes the tokens of the file system it creates; an imported one, plain strings.
    """

    file_system_id: str
    dns_name: str
    mount_name: str
    capacity_gib: int


@dataclass(frozen=True)
class RenderContext:
    """Values the charts need from outside a deployment spec.

    ``bucket_name`` is the model bucket, ``region`` its region (written into Mountpoint mount
    options and the Run:ai streamer's environment, so pods need no instance metadata to find
    it) and ``neuron_ray_image`` the Ray + Neuron image the CDK app builds, with its tag.
    ``vpc_cidr`` is the cluster's VPC, whose addresses the load balancer reaches the serving
    port from (default: the VPC :class:`~eks_inference.constructs.cluster.InferenceCluster`
    creates). ``file_systems`` are the FSx for Lustre file systems of the deployments that
    read their weights from one, by deployment name. The CDK constructs pass tokens here; the
    manifest writer passes plain strings.
    """

    bucket_name: str
    region: str
    neuron_ray_image: str
    vpc_cidr: str = VPC_CIDR
    file_systems: tuple[tuple[str, LustreMount], ...] = ()

    def file_system(self, deployment: str) -> LustreMount:
        """The FSx for Lustre file system of ``deployment`` (``ValueError`` when none)."""
        for name, mount in self.file_systems:
            if name == deployment:
                return mount
        raise MissingFileSystemError(
            f"deployment {deployment!r} reads its weights from an FSx for Lustre file system "
            "the stack creates, whose id is known only once it is deployed: give "
            "weights.fsx.file_system_id, dns_name and mount_name of an existing one to write "
            "its manifests, or deploy it with the CDK app"
        )
