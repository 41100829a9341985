"""The Elastic Fabric Adapter fabric of a node pool with ``efa``: how its nodes' network
interfaces are laid out, and the names of the security group and placement group they share.

Managed node groups (their launch templates) and Karpenter (its EC2NodeClasses) read the same
layout and names from here, so the two modes attach the same fabric, and an EC2NodeClass in
``k8s_manifests/`` names the groups the CloudFormation template creates.

The layout is the EC2 User Guide's recommendation for instances with several network cards
("Maximize network bandwidth on Amazon EC2 instances with multiple network cards"): the
primary interface (network card 0, device 0) is an ENA ``interface``, which carries the node's
IP traffic and the pods' addresses; each network card then gets one ``efa-only`` interface
(card 0 on device 1, every other card on device 0). EFA-only interfaces take no IP address
from the subnet, so a p5.48xlarge with 32 EFAs uses one interface's addresses, not 32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from eks_inference.specification.node_pools import NodePool

# The interface type EC2 and Karpenter both spell for an ENA interface, and for an EFA
# without IP networking.
InterfaceType = Literal["interface", "efa-only"]
ENA_INTERFACE: Final = "interface"
EFA_ONLY_INTERFACE: Final = "efa-only"
# The placement strategy that packs a pool's nodes close together in its one zone, for the
# lowest latency between them.
PLACEMENT_STRATEGY = "cluster"


@dataclass(frozen=True)
class NetworkInterface:
    """One network interface of a node: where it is attached and what it is."""

    network_card: int
    device: int
    type: InterfaceType


def efa_network_interfaces(pool: NodePool) -> tuple[NetworkInterface, ...]:
    """The network interfaces of a node of ``pool``: none (the default, one ENA interface)
    without ``efa``, else the primary ENA interface and one EFA-only interface per network
    card (``pool.efa_interfaces`` of them)."""
    if not pool.efa_interfaces:
        return ()
    return (
        NetworkInterface(0, 0, ENA_INTERFACE),
        NetworkInterface(0, 1, EFA_ONLY_INTERFACE),
        *(NetworkInterface(card, 0, EFA_ONLY_INTERFACE) for card in range(1, pool.efa_interfaces)),
    )


def efa_group_name(cluster_name: str, pool: NodePool) -> str:
    """The name of ``pool``'s EFA security group and of its cluster placement group.

    Both are found by name (Karpenter selects placement groups by name or id only), so the
    name is fixed by the cluster and the pool; it starts with ``efa-`` because a security
    group's name may not start with ``sg-``.
    """
    return f"efa-{cluster_name}-{pool.name}"
