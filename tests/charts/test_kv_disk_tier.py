"""LMCache's disk tier lands on the striped instance store: every GPU instance type with local
NVMe gets a NodeConfig (or Karpenter's instance-store policy) that stripes it and keeps the
kubelet's directory, where emptyDirs live, on the array; the tier is a bounded emptyDir."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
import yaml

from eks_inference.catalog import GIB, INSTANCE_TYPES, Accelerator
from eks_inference.catalog.node_hardware import node_hardware
from eks_inference.charts.karpenter import node_class
from eks_inference.charts.kv_offload import DISK_TIER_PATH, DISK_TIER_VOLUME, disk_request_gib
from eks_inference.charts.node_bootstrap import node_config
from eks_inference.charts.render import render_platform
from eks_inference.charts.scheduling import allocatable, managed_offer
from eks_inference.specification.node_pools import NodePool
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.objects import crd_validator, of_kind, schema_errors
from tests.helpers.platforms import CRDS, REPO
from tests.helpers.rendered import CONTEXT

NODECONFIG_CRD = CRDS / "node.eks.aws_nodeconfigs.yaml"
WITH_NVME = sorted(
    name
    for name, t in INSTANCE_TYPES.items()
    if t.accelerator is Accelerator.NVIDIA and t.local_nvme_gib > 0
)


def _local_storage_schema() -> dict[str, object]:
    crd = next(d for d in yaml.safe_load_all(NODECONFIG_CRD.read_text()) if d)
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schema: dict[str, object] = spec["properties"]["instance"]["properties"]["localStorage"]
    return schema


def test_the_kubelets_directory_cannot_be_left_off_the_array() -> None:
    """The pinned schema's ``disabledMounts`` names every directory nodeadm may keep off the
    array; the kubelet's is not among them."""
    schema = _local_storage_schema()
    properties = schema["properties"]
    assert isinstance(properties, dict)
    assert set(properties["disabledMounts"]["items"]["enum"]) == {"Containerd", "PodLogs", "SOCI"}


def test_every_gpu_type_with_local_nvme_is_one_the_bootstrap_stripes() -> None:
    assert WITH_NVME
    for name, instance in INSTANCE_TYPES.items():
        if instance.accelerator is Accelerator.NVIDIA:
            assert (instance.local_nvme_gib > 0) == node_hardware(name).has_instance_store, name


@pytest.mark.parametrize("instance_type", WITH_NVME)
def test_its_nodes_keep_emptydirs_on_the_striped_nvme(instance_type: str) -> None:
    pool = NodePool(name="gpu", instance_types=(instance_type,))
    config = node_config(pool)
    assert config is not None
    # The kubelet's fields are a KubeletConfiguration the generated schema cannot type (its
    # values are raw extensions): they are checked against Kubernetes' own values in
    # tests/stacks/test_loaders_example.py; the rest against the schema.
    structure = {**config, "spec": {**config["spec"], "kubelet": {"config": {}}}}
    assert schema_errors(crd_validator(NODECONFIG_CRD, "v1alpha1"), structure) == []
    # RAID0 with every bind mount, the kubelet's among them, on the default mount path.
    assert config["spec"]["instance"] == {"localStorage": {"strategy": "RAID0"}}
    assert node_class("c", pool)["spec"]["instanceStorePolicy"] == "RAID0"


def test_the_disk_tier_is_a_bounded_emptydir_the_pod_requests() -> None:
    data = yaml.safe_load((REPO / "examples" / "lmcache.yaml").read_text())
    deployment = copy.deepcopy(data["deployments"][0])
    deployment["kv_cache"] = {"offload": "cpu+disk", "cpu_gib": 32, "disk_gib": 200}
    data["deployments"][0] = deployment
    platform = PlatformSpec.model_validate(data)
    (spec,) = platform.deployments
    (server,) = of_kind(render_platform(platform, CONTEXT)[spec.name], "Deployment")
    pod = server["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == DISK_TIER_VOLUME]
    gib = disk_request_gib(spec)
    assert volume == {"name": DISK_TIER_VOLUME, "emptyDir": {"sizeLimit": f"{gib}Gi"}}
    (container,) = pod["containers"]
    assert {"name": DISK_TIER_VOLUME, "mountPath": DISK_TIER_PATH} in container["volumeMounts"]
    assert container["resources"]["requests"]["ephemeral-storage"] == f"{gib}Gi"


@pytest.mark.parametrize("instance_type", WITH_NVME)
def test_the_nodes_ephemeral_storage_is_the_arrays(instance_type: str) -> None:
    """The scheduling check gives a striped node the array's ephemeral storage (less the
    kubelet's reservation and eviction threshold), not its root volume's."""
    pool = NodePool(name="gpu", instance_types=(instance_type,))
    offer = managed_offer(pool)
    assert offer.instance_store
    instance = INSTANCE_TYPES[instance_type]
    striped = allocatable(instance, pool.root_volume_gib, karpenter=False, instance_store=True)
    root = allocatable(instance, pool.root_volume_gib, karpenter=False)
    reserved = root["ephemeral-storage"] - Fraction(pool.root_volume_gib * GIB) * 9 / 10
    expected = Fraction(instance.local_nvme_gib * GIB) * 9 / 10 + reserved
    assert striped["ephemeral-storage"] == expected
    cpu_pool = NodePool(name="system", instance_types=("m6i.2xlarge",))
    assert not managed_offer(cpu_pool).instance_store
