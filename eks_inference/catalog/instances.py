"""EC2 instance types the library can place model servers on, as data.

Prices are on-demand USD per hour in us-east-1 (*unverified*: public price lists change;
override with ``--price-per-hour`` in the CLI). Memory bandwidth is per accelerator device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import StrEnum

GIB = 1024**3
GB = 1000**3


class Accelerator(StrEnum):
    """The accelerator family of an instance type, which decides device plugin, AMI and taint."""

    NONE = "none"
    NEURON = "neuron"
    NVIDIA = "nvidia"


@dataclass(frozen=True)
class InstanceType:
    """One EC2 instance type.

    ``cores`` counts the units a tensor-parallel group is built from: NeuronCores on
    Inferentia2 (two per chip), GPUs on NVIDIA instances. ``valid_tensor_parallel`` lists the
    degrees the hardware topology supports on this instance. ``max_pods`` is the VPC CNI's
    limit of pods per node without prefix delegation, ENIs x (IPv4 addresses per ENI - 1) + 2
    on the default network card; the kubelet's reserved memory (11 MiB per pod + 255 MiB)
    follows from it on EKS AMIs and in Karpenter alike.

    ``efa_interfaces`` is how many Elastic Fabric Adapters a node can carry (one per network
    card), ``efa_rdma`` whether EFA reads and writes GPU memory directly (GPUDirect RDMA, which
    libfabric uses with ``FI_EFA_USE_DEVICE_RDMA=1``), and ``device_interconnect`` what joins
    the node's accelerators: ``NVLink`` (NVSwitch, every GPU to every other at full speed),
    ``PCIe`` (through the host's PCIe switches) or ``NeuronLink``. Tensor parallelism within
    a node runs over it; only what crosses nodes runs over EFA.
    """

    name: str
    accelerator: Accelerator
    accelerator_model: str
    devices: int
    cores: int
    memory_per_core_bytes: int
    bandwidth_per_device_bytes_per_s: float
    vcpus: int
    memory_gib: int
    price_per_hour: float
    valid_tensor_parallel: tuple[int, ...]
    max_pods: int
    local_nvme_gib: int = 0
    efa: bool = False
    efa_interfaces: int = 0
    efa_rdma: bool = False
    device_interconnect: str = ""

    @property
    def cores_per_device(self) -> int:
        return self.cores // self.devices if self.devices else 0

    @property
    def accelerator_memory_bytes(self) -> int:
        return self.cores * self.memory_per_core_bytes

    @property
    def bandwidth_per_core_bytes_per_s(self) -> float:
        return self.bandwidth_per_device_bytes_per_s / max(self.cores_per_device, 1)

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]


# Inferentia2: 2 NeuronCore-v2 per chip, 16 GiB HBM per core, about 820 GiB/s per chip.
# TP degrees follow the NxD Inference guide (1, 2, 4, 8, 24); 12 is reported for
# inf2.24xlarge/48xlarge but unverified, so it is not offered.
_INF2_CORE_MEMORY = 16 * GIB
_INF2_CHIP_BANDWIDTH = 820 * GIB
# NVIDIA L40S: 48 GB GDDR6 at about 864 GB/s, PCIe only (no NVLink).
_L40S_MEMORY = 48 * GB
_L40S_BANDWIDTH = 864 * GB
# NVIDIA H100 SXM (p5): 80 GB HBM3 at 3.35 TB/s; H200 (p5en): 141 GB HBM3e at 4.8 TB/s; both
# on NVLink 4 through NVSwitch, 900 GB/s per GPU (NVIDIA's H100 and H200 datasheets; the EC2
# P5 page: 8 GPUs, 640 GB and 1128 GB of GPU memory per instance).
_H100_MEMORY = 80 * GB
_H100_BANDWIDTH = 3350 * GB
_H200_MEMORY = 141 * GB
_H200_BANDWIDTH = 4800 * GB


def _inf2(
    name: str, chips: int, vcpus: int, memory_gib: int, price: float, max_pods: int
) -> InstanceType:
    degrees = tuple(d for d in (1, 2, 4, 8, 24) if d <= 2 * chips)
    return InstanceType(
        name=name,
        accelerator=Accelerator.NEURON,
        accelerator_model="Inferentia2",
        devices=chips,
        cores=2 * chips,
        memory_per_core_bytes=_INF2_CORE_MEMORY,
        bandwidth_per_device_bytes_per_s=_INF2_CHIP_BANDWIDTH,
        vcpus=vcpus,
        memory_gib=memory_gib,
        price_per_hour=price,
        valid_tensor_parallel=degrees,
        max_pods=max_pods,
    )


def _gpu(
    name: str,
    model: str,
    gpus: int,
    memory: int,
    bandwidth: float,
    vcpus: int,
    memory_gib: int,
    price: float,
    max_pods: int,
) -> InstanceType:
    return InstanceType(
        name=name,
        accelerator=Accelerator.NVIDIA,
        accelerator_model=model,
        devices=gpus,
        cores=gpus,
        memory_per_core_bytes=memory,
        bandwidth_per_device_bytes_per_s=bandwidth,
        vcpus=vcpus,
        memory_gib=memory_gib,
        price_per_hour=price,
        valid_tensor_parallel=tuple(d for d in (1, 2, 4, 8) if d <= gpus),
        max_pods=max_pods,
    )


def _l40s(
    name: str, gpus: int, vcpus: int, memory_gib: int, price: float, max_pods: int
) -> InstanceType:
    return _gpu(
        name, "L40S", gpus, _L40S_MEMORY, _L40S_BANDWIDTH, vcpus, memory_gib, price, max_pods
    )


def _cpu(name: str, vcpus: int, memory_gib: int, price: float, max_pods: int) -> InstanceType:
    return InstanceType(
        name=name,
        accelerator=Accelerator.NONE,
        accelerator_model="",
        devices=0,
        cores=0,
        memory_per_core_bytes=0,
        bandwidth_per_device_bytes_per_s=0.0,
        vcpus=vcpus,
        memory_gib=memory_gib,
        price_per_hour=price,
        valid_tensor_parallel=(),
        max_pods=max_pods,
    )


# max_pods (last argument): from the ENI limits Karpenter 1.14.1 ships
# (pkg/providers/instancetype/zz_generated.vpclimits.go), the same numbers as the EKS AMI's
# eni-max-pods.txt.
INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        _inf2("inf2.xlarge", 1, 4, 16, 0.7582, 58),
        _inf2("inf2.8xlarge", 1, 32, 128, 1.96786, 234),
        _inf2("inf2.24xlarge", 6, 96, 384, 6.49063, 737),
        _inf2("inf2.48xlarge", 12, 192, 768, 12.98127, 737),
        _l40s("g6e.xlarge", 1, 4, 32, 1.861, 58),
        _l40s("g6e.2xlarge", 1, 8, 64, 2.24208, 58),
        _l40s("g6e.4xlarge", 1, 16, 128, 3.00424, 234),
        _l40s("g6e.8xlarge", 1, 32, 256, 4.52856, 234),
        _l40s("g6e.16xlarge", 1, 64, 512, 7.57719, 737),
        _l40s("g6e.12xlarge", 4, 48, 384, 10.49264, 292),
        _l40s("g6e.24xlarge", 4, 96, 768, 15.06559, 492),
        _l40s("g6e.48xlarge", 8, 192, 1536, 30.13118, 492),
        # For comparison with published benchmarks only; no node pool of the reference app.
        _gpu("g5.12xlarge", "A10G", 4, 24 * GB, 600 * GB, 48, 192, 5.672, 737),
        _gpu("p4d.24xlarge", "A100", 8, 40 * GB, 1555 * GB, 96, 1152, 32.7726, 737),
        # Multi-node serving (nodes_per_replica): 192 vCPUs and 2048 GiB each (the EC2 P5
        # page). Prices after the June 2025 P5 price cut (*unverified*: p5.48xlarge was
        # 98.32 before it); max_pods from the default network card's 2 ENIs of 50 addresses.
        _gpu("p5.48xlarge", "H100", 8, _H100_MEMORY, _H100_BANDWIDTH, 192, 2048, 55.04, 100),
        _gpu("p5en.48xlarge", "H200", 8, _H200_MEMORY, _H200_BANDWIDTH, 192, 2048, 63.296, 100),
        _cpu("m6i.xlarge", 4, 16, 0.192, 58),
        _cpu("m6i.2xlarge", 8, 32, 0.384, 58),
        _cpu("m7i.xlarge", 4, 16, 0.2016, 58),
        _cpu("m7i.2xlarge", 8, 32, 0.4032, 58),
    )
}


# Instance store (total local NVMe SSD, GB as EC2 sells it, here in GiB) and EFA support, from
# the EC2 user guide's "Instance store volumes" and "Elastic Fabric Adapter: supported instance
# types" tables for the accelerated-computing families (unverified here: no AWS API is reachable
# at build time). Inferentia2 and the m6i/m7i system sizes have no instance store; among g6e,
# EFA starts at 8xlarge.
_INSTANCE_STORE_AND_EFA: dict[str, tuple[int, bool]] = {
    "g6e.xlarge": (250, False),
    "g6e.2xlarge": (450, False),
    "g6e.4xlarge": (600, False),
    "g6e.8xlarge": (900, True),
    "g6e.16xlarge": (1900, True),
    "g6e.12xlarge": (3800, True),
    "g6e.24xlarge": (3800, True),
    "g6e.48xlarge": (7600, True),
    "g5.12xlarge": (3800, True),
    "p4d.24xlarge": (8000, True),
    "p5.48xlarge": (30400, True),
    "p5en.48xlarge": (30400, True),
}

# EFA interfaces a node can carry: one per network card (EC2 user guide, "Network cards":
# g6e.24xlarge 2, g6e.48xlarge 4, p4d.24xlarge 4, p5.48xlarge 32, p5en.48xlarge 16; every other
# type with EFA has one card). GPUDirect RDMA over EFA: p4d, p5 and p5en (the EFA guide's
# "RDMA read/write" support); not listed for g6e (*unverified* there), whose traffic then
# bounces through host memory.
_EFA_INTERFACES: dict[str, int] = {
    "g6e.24xlarge": 2,
    "g6e.48xlarge": 4,
    "p4d.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5en.48xlarge": 16,
}
_EFA_RDMA = frozenset({"p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge"})
# What joins a node's accelerators: NVSwitch on the A100/H100/H200 instances (600 GB/s per
# GPU on p4d, 900 GB/s on p5 and p5en), PCIe on L40S and A10G, NeuronLink-v2 on Inferentia2.
_NVLINK = frozenset({"p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge"})


def _interconnect(instance: InstanceType) -> str:
    if instance.accelerator is Accelerator.NEURON:
        return "NeuronLink"
    if instance.accelerator is Accelerator.NVIDIA:
        return "NVLink" if instance.name in _NVLINK else "PCIe"
    return ""


def _with_local_facts(instance: InstanceType) -> InstanceType:
    instance = replace(instance, device_interconnect=_interconnect(instance))
    facts = _INSTANCE_STORE_AND_EFA.get(instance.name)
    if facts is None:
        return instance
    store_gb, efa = facts
    return replace(
        instance,
        local_nvme_gib=store_gb * GB // GIB,
        efa=efa,
        efa_interfaces=_EFA_INTERFACES.get(instance.name, 1) if efa else 0,
        efa_rdma=instance.name in _EFA_RDMA,
    )


INSTANCE_TYPES = {name: _with_local_facts(t) for name, t in INSTANCE_TYPES.items()}


# EC2's sizes below xlarge, smallest first; ``<n>xlarge`` is n times xlarge, and metal is the
# whole host, larger than any.
_SMALL_SIZES = ("nano", "micro", "small", "medium", "large")
_MULTIPLE_OF_XLARGE = re.compile(r"(\d*)xlarge")


def by_size(name: str) -> tuple[str, float, str]:
    """Sort key of an instance type name: by family, then by size as EC2 orders sizes.

    As text, ``g6e.24xlarge`` would come before ``g6e.2xlarge``; lists of instance types in
    messages read smallest to largest within each family instead.
    """
    family, _, size = name.partition(".")
    multiple = _MULTIPLE_OF_XLARGE.fullmatch(size)
    if multiple is not None:
        rank = float(multiple[1] or 1)
    elif size in _SMALL_SIZES:
        rank = (_SMALL_SIZES.index(size) + 1) / (len(_SMALL_SIZES) + 1)
    else:
        rank = float("inf")
    return family, rank, size


def instance_type(name: str) -> InstanceType:
    """Look up an instance type; the error lists what the catalog offers."""
    try:
        return INSTANCE_TYPES[name]
    except KeyError:
        known = ", ".join(sorted(INSTANCE_TYPES, key=by_size))
        raise KeyError(f"unknown instance type {name!r}; known: {known}") from None
