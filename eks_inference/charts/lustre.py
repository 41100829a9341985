"""FSx for Lustre volumes: a statically provisioned PersistentVolume and its claim.

The FSx CSI driver mounts an existing file system from a PersistentVolume whose
``volumeHandle`` is the file system id and whose volume attributes ``dnsname`` and
``mountname`` say where it is (the driver's static provisioning example at the pinned
version, ``examples/kubernetes/static_provisioning/specs/pv.yaml``). Serving only reads, so
the pair is ``ReadOnlyMany`` and pods mount it read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eks_inference.charts.context import LustreMount
from eks_inference.charts.contract import LustreVolumeNeed, PlatformNeeds
from eks_inference.charts.metadata import api_object, metadata, object_labels
from eks_inference.charts.record import ChartRecord, deployment_chart
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.specification.deployment import ModelDeploymentSpec

CSI_DRIVER = "fsx.csi.aws.com"


@dataclass(frozen=True)
class LustreVolume:
    """A PersistentVolume of one FSx for Lustre file system, and the claim bound to it.

    The claim (``name``, what pods mount) and the volume (:attr:`volume_name`) name each other
    (``volumeName``, ``claimRef``), so the pair binds only to each other; the volume is
    retained when released, since the file system outlives it.
    """

    name: str
    file_system: LustreMount
    namespace: str = INFERENCE_NAMESPACE

    @property
    def claim_name(self) -> str:
        return self.name

    @property
    def volume_name(self) -> str:
        """Cluster-scoped, so named with its namespace."""
        return f"{self.namespace}-{self.name}"

    @property
    def need(self) -> LustreVolumeNeed:
        return LustreVolumeNeed(
            volume_name=self.volume_name,
            claim_name=self.claim_name,
            file_system_id=self.file_system.file_system_id,
        )

    def objects(self, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """The PersistentVolume and its claim, labelled ``labels``."""
        capacity = f"{self.file_system.capacity_gib}Gi"
        volume = api_object(
            "v1",
            "PersistentVolume",
            metadata(self.volume_name, labels, namespace=None),
            {
                "spec": {
                    "accessModes": ["ReadOnlyMany"],
                    "capacity": {"storage": capacity},
                    "volumeMode": "Filesystem",
                    "storageClassName": "",
                    "persistentVolumeReclaimPolicy": "Retain",
                    "claimRef": {"namespace": self.namespace, "name": self.claim_name},
                    "csi": {
                        "driver": CSI_DRIVER,
                        "volumeHandle": self.file_system.file_system_id,
                        "readOnly": True,
                        "volumeAttributes": {
                            "dnsname": self.file_system.dns_name,
                            "mountname": self.file_system.mount_name,
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
                    "accessModes": ["ReadOnlyMany"],
                    "storageClassName": "",
                    "volumeName": self.volume_name,
                    "resources": {"requests": {"storage": capacity}},
                }
            },
        )
        return [volume, claim]


def lustre_volume_chart(spec: ModelDeploymentSpec, role: str, volume: LustreVolume) -> ChartRecord:
    """A deployment's FSx for Lustre volume (``role`` names it): claim ``<deployment>-<role>``."""
    return deployment_chart(
        spec,
        role,
        volume.objects(object_labels(spec, role)),
        PlatformNeeds(namespaces=(volume.namespace,), lustre_volumes=(volume.need,)),
    )
