"""Mountpoint volumes: static PV and PVC bound to each other, read-only by default, cached."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from eks_inference.charts.mountpoint import (
    CSI_DRIVER,
    MountpointVolume,
    cache_size_gib,
)
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.versions import KUBERNETES_VERSION
from tests.helpers.checks import found
from tests.helpers.objects import of_kind
from tests.helpers.rendered import CONTEXT, Rendered


def _pairs(rendered: Rendered) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each PersistentVolumeClaim with the PersistentVolume it names."""
    pairs = []
    for objects in rendered.objects.values():
        volumes = {v["metadata"]["name"]: v for v in of_kind(objects, "PersistentVolume")}
        for claim in of_kind(objects, "PersistentVolumeClaim"):
            pairs.append((volumes[claim["spec"]["volumeName"]], claim))
        assert len(volumes) == len(of_kind(objects, "PersistentVolumeClaim"))
    return pairs


def test_claims_and_volumes_bind_only_to_each_other(rendered: Rendered) -> None:
    pairs = _pairs(rendered)
    assert pairs
    handles = [pv["spec"]["csi"]["volumeHandle"] for pv, _ in pairs]
    assert len(set(handles)) == len(handles)
    for pv, pvc in pairs:
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
        assert pv["spec"]["claimRef"] == {
            "name": pvc["metadata"]["name"],
            "namespace": pvc["metadata"]["namespace"],
        }
        assert "namespace" not in pv["metadata"]
        assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == ""
        assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadOnlyMany"]
        assert pvc["spec"]["resources"]["requests"]["storage"] == pv["spec"]["capacity"]["storage"]


def test_volume_source_and_mount_options(rendered: Rendered) -> None:
    for pv, pvc in _pairs(rendered):
        csi = pv["spec"]["csi"]
        assert csi["driver"] == CSI_DRIVER
        assert csi["volumeAttributes"]["bucketName"] == CONTEXT.bucket_name
        assert csi["volumeAttributes"]["cache"] == "emptyDir"
        limit = csi["volumeAttributes"]["cacheEmptyDirSizeLimit"]
        assert 4 <= int(limit.removesuffix("Gi")) <= 64
        options = pv["spec"]["mountOptions"]
        assert all(not o.startswith("-") for o in options)
        assert f"region {CONTEXT.region}" in options
        assert "allow-other" in options
        (prefix,) = [o.removeprefix("prefix ") for o in options if o.startswith("prefix ")]
        assert prefix.endswith("/")
        (ttl,) = [o for o in options if o.startswith("metadata-ttl ")]
        if pvc["metadata"]["name"].endswith("-model-weights"):
            assert ttl == "metadata-ttl indefinite"


def test_weights_volume_mounts_the_weights_prefix(rendered: Rendered) -> None:
    for spec in rendered.platform.deployments:
        claims = {
            c["metadata"]["name"]
            for c in of_kind(rendered.objects[spec.name], "PersistentVolumeClaim")
        }
        weights = f"{spec.name}-model-weights"
        assert (weights in claims) is (spec.weights.loader == "mountpoint")
        volumes = of_kind(rendered.objects[spec.name], "PersistentVolume")
        weight_volumes = [pv for pv in volumes if pv["spec"]["claimRef"]["name"] == weights]
        assert len(weight_volumes) == (spec.weights.loader == "mountpoint")
        for pv in weight_volumes:
            assert f"prefix {spec.weights.prefix}" in pv["spec"]["mountOptions"]


def test_ray_volumes_are_owned_by_the_ray_user(rendered: Rendered) -> None:
    volumes = [
        (spec, pv)
        for spec in rendered.platform.deployments
        for pv in of_kind(rendered.objects[spec.name], "PersistentVolume")
    ]
    for spec, pv in found(volumes):
        options = pv["spec"]["mountOptions"]
        ray = spec.engine == "rayservice"
        assert ("uid=1000" in options) is ray
        assert ("gid=100" in options) is ray


@pytest.mark.parametrize(("gib", "expected"), [(0.5, 4), (15.0, 17), (57.0, 63), (141.0, 64)])
def test_cache_is_bounded(gib: float, expected: int) -> None:
    assert cache_size_gib(gib) == expected


def test_read_write_variant_for_writers() -> None:
    """A job that writes artifacts gets ReadWriteMany, may overwrite, and owns the files."""
    volume = MountpointVolume(
        name="compile-artifacts",
        bucket_name=CONTEXT.bucket_name,
        region=CONTEXT.region,
        prefix="neuron-artifacts/",
        cache_size_gib=8,
        read_only=False,
        metadata_ttl=None,
        uid=1000,
        gid=100,
    )
    pv, pvc = volume.objects(labels={})
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["mountOptions"] == [
        "allow-other",
        f"region {CONTEXT.region}",
        "prefix neuron-artifacts/",
        "allow-overwrite",
        "uid=1000",
        "gid=100",
    ]
    assert pvc["spec"]["volumeName"] == volume.volume_name == pv["metadata"]["name"]
    assert pvc["metadata"]["namespace"] == INFERENCE_NAMESPACE
    for obj in (pv, pvc):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_prefix_must_end_with_a_slash() -> None:
    with pytest.raises(ValueError, match="ending with '/'"):
        MountpointVolume(
            name="v",
            bucket_name="b",
            region="us-east-1",
            prefix="models",
            cache_size_gib=4,
        )
