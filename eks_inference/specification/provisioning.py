"""``NodeProvisioning``: what adds and removes a platform's nodes, and what follows from it.

Every decision the choice drives (which pools are managed node groups, whether the Cluster
Autoscaler or Karpenter runs) is read here, so that the rest of the package asks the value a
question instead of comparing strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from eks_inference.specification.node_pools import NodePool, system_pool_of


class NodeProvisioning(StrEnum):
    """What adds and removes a platform's nodes (``node_provisioning`` in a platform file).

    The system pool stays a managed node group either way: something must run the add-ons,
    Karpenter included, before any other node exists.
    """

    MANAGED = "managed"
    """A managed node group per pool, scaled by the Cluster Autoscaler."""
    KARPENTER = "karpenter"
    """Karpenter launches every pool's nodes but the system pool's."""

    @property
    def uses_karpenter(self) -> bool:
        """Whether Karpenter provisions the nodes of the pools other than the system pool."""
        return self is NodeProvisioning.KARPENTER

    @property
    def runs_cluster_autoscaler(self) -> bool:
        """Whether the Cluster Autoscaler scales the node groups: beside Karpenter it would
        fight it over the system node group."""
        return self is NodeProvisioning.MANAGED

    def manages(self, pool: NodePool, system: NodePool) -> bool:
        """Whether ``pool`` is a managed node group, given the platform's ``system`` pool
        (:func:`~eks_inference.specification.node_pools.system_pool_of`): asked of each pool
        in turn, without searching the pools for it."""
        return not self.uses_karpenter or pool is system

    def managed_pools(self, pools: Sequence[NodePool]) -> tuple[NodePool, ...]:
        """The pools of ``pools`` that are managed node groups: all of them, or the system
        pool alone with Karpenter."""
        if self.uses_karpenter:
            return (system_pool_of(pools),)
        return tuple(pools)
