"""Mountpoint for Amazon S3 volumes: a statically provisioned PersistentVolume and its claim.

The Mountpoint CSI driver (v2) supports static provisioning only: a PersistentVolume names the
bucket and, through mount options, the prefix, and a PersistentVolumeClaim bound to exactly
that volume is what pods mount. :class:`MountpointVolume` is the reusable pair for any prefix;
:func:`mountpoint_volume_chart` puts one into a deployment's chart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eks_inference.charts.contract import MountedPrefix, PlatformNeeds
from eks_inference.charts.metadata import api_object, metadata, object_labels
from eks_inference.charts.record import ChartRecord, chart_id, deployment_chart
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.specification.aws_types import key_prefix_problem
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.weights_rules import ebs_cache_gib

CSI_DRIVER = "s3.csi.aws.com"
# Mountpoint ignores capacity, but the API requires one and a claim binds only to a volume at
# least as large as its request; the same value is used on both sides.
_NOMINAL_CAPACITY = "1Ti"


def cache_size_gib(object_set_gib: float) -> int:
    """Local cache size on a root volume for a volume whose objects total ``object_set_gib``
    (:func:`~eks_inference.specification.weights_rules.ebs_cache_gib`; on NVMe see
    :func:`~eks_inference.specification.weights_rules.mountpoint_cache_gib`)."""
    return ebs_cache_gib(object_set_gib)


@dataclass(frozen=True)
class MountpointVolume:
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
    The claim (``name``, what pods mount) and the volume (:attr:`volume_name`) name each other
    (``volumeName``, ``claimRef``), so the pair binds only to each other.
    """

    name: str
    bucket_name: str
    region: str
    prefix: str
    cache_size_gib: int
    read_only: bool = True
    metadata_ttl: str | None = "indefinite"
    uid: int | None = None
    gid: int | None = None
    namespace: str = INFERENCE_NAMESPACE

    def __post_init__(self) -> None:
        problem = key_prefix_problem(self.prefix, name="Mountpoint prefix")
        if problem is not None:
            raise ValueError(problem)

    @property
    def claim_name(self) -> str:
        """The claim's name: what pods mount."""
        return self.name

    @property
    def volume_name(self) -> str:
        """The PersistentVolume's name, also its handle.

        PersistentVolumes are cluster-scoped: the namespace in the name keeps it unique across
        namespaces, and the driver needs a handle unique in the cluster, which this is.
        """
        return f"{self.namespace}-{self.name}"

    @property
    def mounted(self) -> MountedPrefix:
        """What this volume asks of the platform: the driver may read :attr:`prefix`."""
        return MountedPrefix(
            prefix=self.prefix,
            volume_name=self.volume_name,
            claim_name=self.claim_name,
            read_only=self.read_only,
        )

    def objects(self, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """The PersistentVolume and its claim, labelled ``labels``."""
        access_mode = "ReadOnlyMany" if self.read_only else "ReadWriteMany"
        options = ["allow-other", f"region {self.region}", f"prefix {self.prefix}"]
        if self.metadata_ttl is not None:
            options.append(f"metadata-ttl {self.metadata_ttl}")
        if not self.read_only:
            options.append("allow-overwrite")
        if self.uid is not None:
            options.append(f"uid={self.uid}")
        if self.gid is not None:
            options.append(f"gid={self.gid}")
        volume = api_object(
            "v1",
            "PersistentVolume",
            metadata(self.volume_name, labels, namespace=None),
            {
                "spec": {
                    "accessModes": [access_mode],
                    "capacity": {"storage": _NOMINAL_CAPACITY},
                    "storageClassName": "",
                    "persistentVolumeReclaimPolicy": "Retain",
                    "claimRef": {"namespace": self.namespace, "name": self.claim_name},
                    "mountOptions": options,
                    "csi": {
                        "driver": CSI_DRIVER,
                        "volumeHandle": self.volume_name,
                        "volumeAttributes": {
                            "bucketName": self.bucket_name,
                            "cache": "emptyDir",
                            "cacheEmptyDirSizeLimit": f"{self.cache_size_gib}Gi",
                        },
                    },
                }
            },
        )
        claim = api_object(
            "v1",
            "PersistentVolumeClaim",
            metadata(self.claim_name, labels, namespace=self.namespace),
            {
                "spec": {
                    "accessModes": [access_mode],
                    "storageClassName": "",
                    "volumeName": self.volume_name,
                    "resources": {"requests": {"storage": _NOMINAL_CAPACITY}},
                }
            },
        )
        return [volume, claim]


def deployment_volume(
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
    version: str | None = None,
) -> MountpointVolume:
    """The Mountpoint volume ``role`` of ``spec``: claim ``<deployment>-<role>[-<version>]``.

    A ``version`` in the name makes a volume whose prefix changes a new volume: a
    PersistentVolume's source cannot change in place, and pods roll onto the new claim.
    """
    name = chart_id(spec.name, role)
    return MountpointVolume(
        name=f"{name}-{version}" if version else name,
        bucket_name=bucket_name,
        region=region,
        prefix=prefix,
        cache_size_gib=cache_size_gib,
        metadata_ttl=metadata_ttl,
        uid=uid,
        gid=gid,
    )


def mountpoint_volume_chart(
    spec: ModelDeploymentSpec, role: str, volume: MountpointVolume
) -> ChartRecord:
    """A deployment's Mountpoint volume for one prefix of the model bucket (``role`` names it).

    The claim is named ``<deployment>-<role>``; the volume ``inference-<deployment>-<role>``.
    Charts that mount it take the claim name from ``volume``.
    """
    return deployment_chart(
        spec,
        role,
        volume.objects(object_labels(spec, role)),
        PlatformNeeds(namespaces=(volume.namespace,), mounted_prefixes=(volume.mounted,)),
    )
