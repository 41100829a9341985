"""The image and FSx for Lustre loaders, rendered from the example platform: strictly valid
Kubernetes 1.35 objects, a pinned init container copying the weights into a bounded local
volume, and FSx PersistentVolumes named as the pinned FSx CSI driver's example names them."""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes_validate
import pytest
import yaml

from eks_inference.charts.context import LustreMount, MissingFileSystemError
from eks_inference.charts.deployment import deployment_charts, needs_of
from eks_inference.charts.model_server import MODEL_MOUNT_PATH
from eks_inference.charts.render import render_files, render_platform
from eks_inference.charts.weights_loaders import IMAGE_COPY_CONTAINER, LUSTRE_WEIGHTS_DIRECTORY
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.checks import found
from tests.helpers.objects import is_custom_resource, of_kind, one
from tests.helpers.platforms import REPO
from tests.helpers.rendered import CONTEXT

EXAMPLE = PlatformSpec.from_yaml(REPO / "examples" / "loaders.yaml")
UPSTREAM_PV = REPO / "tests" / "upstream" / "aws-fsx-csi-driver-v1.9.0-static-pv.yaml"
FILE_SYSTEM = LustreMount(
    file_system_id="fs-0123456789abcdef0",
    dns_name="fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    mount_name="abcdefgh",
    capacity_gib=1200,
)
CONTEXT_WITH_FSX = dataclasses.replace(CONTEXT, file_systems=(("llama3-8b-fsx", FILE_SYSTEM),))


@pytest.fixture(scope="module")
def objects() -> dict[str, list[dict[str, Any]]]:
    return render_platform(EXAMPLE, CONTEXT_WITH_FSX)


def _server_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def test_every_core_object_validates_strictly(objects: dict[str, list[dict[str, Any]]]) -> None:
    core = [
        (name, document)
        for name, documents in objects.items()
        for document in documents
        if not is_custom_resource(document)
    ]
    for name, document in found(core):
        assert kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True), name


def test_the_image_loader_copies_the_pinned_image_into_a_bounded_volume(
    objects: dict[str, list[dict[str, Any]]],
) -> None:
    spec = EXAMPLE.deployment("qwen25-1b5-image")
    image = spec.weights.image
    assert image is not None
    pod = _server_pod(objects[spec.name])
    (copy,) = (c for c in pod["initContainers"] if c["name"] == IMAGE_COPY_CONTAINER)
    assert copy["image"] == image.reference
    assert "@sha256:" in copy["image"]
    assert copy["command"] == ["cp", "-R", f"{image.path}/.", MODEL_MOUNT_PATH]
    assert copy["securityContext"]["readOnlyRootFilesystem"] is True
    assert copy["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert copy["resources"]["requests"] == copy["resources"]["limits"]
    (volume,) = (v for v in pod["volumes"] if v["name"] == "model-weights")
    assert volume["emptyDir"] == {"sizeLimit": "4Gi"}  # 2.9 GiB of weights plus 10%
    (server,) = pod["containers"]
    (mount,) = (m for m in server["volumeMounts"] if m["name"] == "model-weights")
    assert mount == {"name": "model-weights", "mountPath": MODEL_MOUNT_PATH, "readOnly": True}
    assert server["args"][0] == MODEL_MOUNT_PATH
    assert "--load-format" not in server["args"]


def test_the_image_loader_needs_no_volume_and_no_aws_identity() -> None:
    spec = EXAMPLE.deployment("qwen25-1b5-image")
    rendered = deployment_charts(spec, EXAMPLE.placement(spec), CONTEXT)
    assert rendered.weights is None
    needs = needs_of(rendered.charts)
    assert needs.service_accounts == ()
    assert needs.mounted_prefixes == ()
    assert needs.lustre_volumes == ()


def test_the_lustre_volume_follows_the_pinned_driver_example(
    objects: dict[str, list[dict[str, Any]]],
) -> None:
    upstream = yaml.safe_load(UPSTREAM_PV.read_text())["spec"]["csi"]
    documents = objects["llama3-8b-fsx"]
    volume = one(documents, "PersistentVolume")["spec"]
    claim = one(documents, "PersistentVolumeClaim")
    assert volume["csi"]["driver"] == upstream["driver"]
    assert set(volume["csi"]["volumeAttributes"]) == set(upstream["volumeAttributes"])
    assert volume["csi"]["volumeHandle"] == FILE_SYSTEM.file_system_id
    assert volume["csi"]["volumeAttributes"] == {
        "dnsname": FILE_SYSTEM.dns_name,
        "mountname": FILE_SYSTEM.mount_name,
    }
    assert volume["accessModes"] == ["ReadOnlyMany"]
    assert volume["persistentVolumeReclaimPolicy"] == "Retain"
    assert volume["claimRef"]["name"] == claim["metadata"]["name"]
    assert claim["spec"]["volumeName"] == one(documents, "PersistentVolume")["metadata"]["name"]
    pod = _server_pod(documents)
    (server,) = pod["containers"]
    (mount,) = (m for m in server["volumeMounts"] if m["name"] == "model-weights")
    assert mount["subPath"] == LUSTRE_WEIGHTS_DIRECTORY
    assert mount["readOnly"] is True
    (source,) = (v for v in pod["volumes"] if v["name"] == "model-weights")
    assert source["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


def test_the_lustre_volume_is_recorded_for_the_platform() -> None:
    spec = EXAMPLE.deployment("llama3-8b-fsx")
    rendered = deployment_charts(spec, EXAMPLE.placement(spec), CONTEXT_WITH_FSX)
    needs = needs_of(rendered.charts)
    (need,) = needs.lustre_volumes
    assert need.file_system_id == FILE_SYSTEM.file_system_id
    assert needs.mounted_prefixes == ()
    assert needs.service_accounts == ()


def test_a_mountpoint_cache_on_nvme_takes_its_size(
    objects: dict[str, list[dict[str, Any]]],
) -> None:
    (volume,) = of_kind(objects["qwen25-7b-mountpoint"], "PersistentVolume")
    assert volume["spec"]["csi"]["volumeAttributes"]["cacheEmptyDirSizeLimit"] == "64Gi"


def test_a_created_file_system_cannot_be_written_without_cdk() -> None:
    with pytest.raises(MissingFileSystemError, match=r"weights\.fsx\.file_system_id"):
        render_files(EXAMPLE, CONTEXT)
