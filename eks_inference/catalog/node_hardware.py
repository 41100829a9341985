"""What a node brings beyond its accelerators: network, local NVMe and NUMA layout, as data.

The cold-start estimate reads the network bandwidth (weights streamed from S3) and the local
disk (image layers, caches); the node bootstrap formats and mounts the instance store where
there is one; NUMA-aligned serving reads which accelerators sit on which NUMA node.

Sources: network bandwidth and instance store are the EC2 instance types guide's
specification tables (accelerated computing, general purpose: "Network specifications" and
"Instance store specifications"), *unverified* from here since no AWS API is reachable at
build time. NUMA layouts: Inferentia2 from the design documents' inf2.48xlarge topology
(NeuronCores 0-11 on NUMA node 0, 12-23 on node 1, seed 000 section on NUMA binding); the
others from the processors the same guide names (one AMD EPYC 7R13 socket up to 96 vCPUs,
two above, Intel Xeon sockets likewise), *unverified* on a running instance.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1000**3


@dataclass(frozen=True)
class NodeHardware:
    """One instance type's network, instance store and NUMA layout.

    ``network_gbps`` is the bandwidth EC2 specifies (the burst figure for "up to" sizes,
    which a model load of a few seconds stays within). ``instance_store_gb`` is the total of
    its NVMe instance-store disks (0: EBS only) over ``instance_store_disks`` disks.
    ``numa_nodes`` is how many NUMA nodes the vCPUs and memory split into, evenly;
    ``devices_per_numa_node`` how many accelerator devices (GPUs, Inferentia2 chips) attach
    to each, also evenly.
    """

    network_gbps: float
    instance_store_gb: int
    instance_store_disks: int
    numa_nodes: int
    devices_per_numa_node: int

    @property
    def network_bytes_per_second(self) -> float:
        return self.network_gbps * 1e9 / 8

    @property
    def has_instance_store(self) -> bool:
        return self.instance_store_gb > 0

    @property
    def instance_store_bytes(self) -> int:
        return self.instance_store_gb * GB


def _ebs_only(network_gbps: float, numa_nodes: int = 1, devices: int = 0) -> NodeHardware:
    return NodeHardware(network_gbps, 0, 0, numa_nodes, devices // numa_nodes)


def _nvme(
    network_gbps: float, disks: int, gb_per_disk: int, numa_nodes: int, devices: int
) -> NodeHardware:
    return NodeHardware(network_gbps, disks * gb_per_disk, disks, numa_nodes, devices // numa_nodes)


NODE_HARDWARE: dict[str, NodeHardware] = {
    # Inferentia2: EBS only.
    "inf2.xlarge": _ebs_only(15, devices=1),
    "inf2.8xlarge": _ebs_only(25, devices=1),
    "inf2.24xlarge": _ebs_only(50, devices=6),
    "inf2.48xlarge": _ebs_only(100, numa_nodes=2, devices=12),
    # G6e (L40S): local NVMe on every size.
    "g6e.xlarge": _nvme(20, 1, 250, 1, 1),
    "g6e.2xlarge": _nvme(20, 1, 450, 1, 1),
    "g6e.4xlarge": _nvme(20, 1, 600, 1, 1),
    "g6e.8xlarge": _nvme(25, 1, 900, 1, 1),
    "g6e.16xlarge": _nvme(35, 1, 1900, 1, 1),
    "g6e.12xlarge": _nvme(100, 2, 1900, 1, 4),
    "g6e.24xlarge": _nvme(200, 2, 1900, 1, 4),
    "g6e.48xlarge": _nvme(400, 4, 1900, 2, 8),
    # Benchmark comparisons only.
    "g5.12xlarge": _nvme(40, 1, 3800, 1, 4),
    "p4d.24xlarge": _nvme(400, 8, 1000, 2, 8),
    # P5 (H100) and P5en (H200): 3200 Gbps of EFA, 8 x 3.8 TB NVMe, two sockets.
    "p5.48xlarge": _nvme(3200, 8, 3800, 2, 8),
    "p5en.48xlarge": _nvme(3200, 8, 3800, 2, 8),
    # CPU pools: EBS only.
    "m6i.xlarge": _ebs_only(12.5),
    "m6i.2xlarge": _ebs_only(12.5),
    "m7i.xlarge": _ebs_only(12.5),
    "m7i.2xlarge": _ebs_only(12.5),
}


def node_hardware(instance_type: str) -> NodeHardware:
    """The hardware of a catalog instance type (``KeyError`` naming it when it has none)."""
    try:
        return NODE_HARDWARE[instance_type]
    except KeyError:
        raise KeyError(f"the catalog has no node hardware for {instance_type!r}") from None
