"""Mountpoint for Amazon S3 volumes: a statically provisioned PersistentVolume and its claim.

The Mountpoint CSI driver (v2) supports static provisioning only: a PersistentVolume names the
bucket and, through mount options, the prefix, and a PersistentVolumeClaim bound to exactly
that volume is what pods mount. :class:`MountpointVolume` is the reusable pair for any prefix;
:class:`MountpointVolumeChart` puts one into a deployment's chart.
"""

from __future__ import annotations

import math

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from eks_inference.charts import values
from eks_inference.charts.common import DeploymentChart
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.spec import ModelDeploymentSpec

CSI_DRIVER = "s3.csi.aws.com"
# Mountpoint ignores capacity, but the API requires one and a claim binds only to a volume at
# least as large as its request; the same value is used on both sides.
_NOMINAL_CAPACITY = "1Ti"
# The local read cache is an emptyDir of the Mountpoint pod, on the node's root volume (200
# GiB on accelerator pools by default, shared with the images). It is sized to hold the whole
# object set (weights plus 10%), so that pods sharing a node (three Ray workers on one
# inf2.48xlarge) and restarted pods read from local disk instead of S3, but never more than
# 64 GiB: above that a model is read once per node and the cache would only crowd the disk.
_CACHE_HEADROOM = 1.1
_CACHE_MIN_GIB = 4
_CACHE_MAX_GIB = 64
# Where a chart keeps the Mountpoint volumes created in it (see mountpoint_volumes).
_CHART_VOLUMES = "_eks_inference_mountpoint_volumes"


def cache_size_gib(object_set_gib: float) -> int:
    """Local cache size for a volume whose objects total ``object_set_gib``."""
    return max(_CACHE_MIN_GIB, min(_CACHE_MAX_GIB, math.ceil(object_set_gib * _CACHE_HEADROOM)))


class MountpointVolume(Construct):
    """A PersistentVolume for one bucket prefix, and the PersistentVolumeClaim bound to it.

    Defaults are for serving: ``read_only`` volumes use the ``ReadOnlyMany`` access mode (the
    driver then mounts with ``--read-only``) and ``metadata_ttl`` defaults to ``indefinite``,
    right for immutable objects such as weights: a directory listing is fetched once per
    node, not on every open. Pass a finite TTL (``"60"``) for objects that may appear after
    the volume is first mounted. A read-write volume (``read_only=False``, for a job writing
    artifacts) uses ``ReadWriteMany`` and ``allow-overwrite`` so that a rerun replaces files.

    ``allow-other`` is always set: Mountpoint runs as another user than the pod, and FUSE
    denies every other user, root included, without it. ``uid``/``gid`` make the files owned
    by the consuming user (the Ray images' uid 1000), which a writer needs. ``region`` is
    explicit so that the mount needs no instance metadata (IMDS hop limit) to find the bucket.
    The claim's ``volumeName`` and the volume's ``claimRef`` are the names the two objects
    are given (one string each, used on both sides), so the pair binds only to each other;
    :attr:`claim_name` is what pods mount.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        name: str,
        bucket_name: str,
        region: str,
        prefix: str,
        cache_size_gib: int,
        read_only: bool = True,
        metadata_ttl: str | None = "indefinite",
        uid: int | None = None,
        gid: int | None = None,
        namespace: str = INFERENCE_NAMESPACE,
    ) -> None:
        super().__init__(scope, id)
        if not prefix.endswith("/"):
            raise ValueError(f"Mountpoint prefix {prefix!r} must end with '/'")
        access_mode = "ReadOnlyMany" if read_only else "ReadWriteMany"
        options = ["allow-other", f"region {region}", f"prefix {prefix}"]
        if metadata_ttl is not None:
            options.append(f"metadata-ttl {metadata_ttl}")
        if not read_only:
            options.append("allow-overwrite")
        if uid is not None:
            options.append(f"uid={uid}")
        if gid is not None:
            options.append(f"gid={gid}")
        self.prefix = prefix
        self.read_only = read_only
        # PersistentVolumes are cluster-scoped: the namespace in the name keeps it unique
        # across namespaces, and the handle is the name, unique by construction.
        volume_name = f"{namespace}-{name}"
        self.claim_name = name
        """The claim's name: what pods mount (the same string the claim object is given)."""
        self.volume = k8s.KubePersistentVolume(
            self,
            "volume",
            metadata=k8s.ObjectMeta(name=volume_name),
            spec=k8s.PersistentVolumeSpec(
                access_modes=[access_mode],
                capacity={"storage": values.quantity(_NOMINAL_CAPACITY)},
                storage_class_name="",
                persistent_volume_reclaim_policy="Retain",
                claim_ref=k8s.ObjectReference(namespace=namespace, name=self.claim_name),
                mount_options=options,
                csi=k8s.CsiPersistentVolumeSource(
                    driver=CSI_DRIVER,
                    volume_handle=volume_name,
                    volume_attributes={
                        "bucketName": bucket_name,
                        "cache": "emptyDir",
                        "cacheEmptyDirSizeLimit": f"{cache_size_gib}Gi",
                    },
                ),
            ),
        )
        self.claim = k8s.KubePersistentVolumeClaim(
            self,
            "claim",
            metadata=k8s.ObjectMeta(name=self.claim_name, namespace=namespace),
            spec=k8s.PersistentVolumeClaimSpec(
                access_modes=[access_mode],
                storage_class_name="",
                volume_name=volume_name,
                resources=k8s.ResourceRequirements(
                    requests={"storage": values.quantity(_NOMINAL_CAPACITY)}
                ),
            ),
        )
        chart = scope if isinstance(scope, cdk8s.Chart) else cdk8s.Chart.of(scope)
        chart.__dict__.setdefault(_CHART_VOLUMES, []).append(self)


def mountpoint_volumes(chart: cdk8s.Chart) -> tuple[MountpointVolume, ...]:
    """The :class:`MountpointVolume` objects whose chart is ``chart``, in creation order.

    Each volume records itself on its chart when it is created, so this needs no walk of the
    construct tree (which, for charts synthesized from Python, is a round trip to Node.js
    per construct).
    """
    volumes: list[MountpointVolume] = chart.__dict__.get(_CHART_VOLUMES, [])
    return tuple(volumes)


class MountpointVolumeChart(DeploymentChart):
    """A deployment's Mountpoint volume for one prefix of the model bucket (``role`` names it).

    The claim is named ``<deployment>-<role>``; the volume ``inference-<deployment>-<role>``.
    Charts that mount it take the claim name from :attr:`volume`.
    """

    def __init__(
        self,
        scope: Construct,
        spec: ModelDeploymentSpec,
        role: str,
        *,
        bucket_name: str,
        region: str,
        prefix: str,
        cache_size_gib: int,
        metadata_ttl: str | None = "indefinite",
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        super().__init__(scope, spec, role)
        self.volume = MountpointVolume(
            self,
            "mountpoint",
            name=f"{spec.name}-{role}",
            bucket_name=bucket_name,
            region=region,
            prefix=prefix,
            cache_size_gib=cache_size_gib,
            metadata_ttl=metadata_ttl,
            uid=uid,
            gid=gid,
        )
