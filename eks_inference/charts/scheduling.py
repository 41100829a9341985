"""Whether the nodes a platform can start can run its pods: checked before anything deploys.

A pod the scheduler can place nowhere stays Pending forever, and an autoscaler that cannot see
a node for it never starts one: the most common way a model never comes up. Each chart records
its pod templates (:class:`~eks_inference.charts.contract.PodNeed`); each provisioner offers
nodes (:class:`NodeOffer`): a managed node group, from its :class:`NodePool`, or a Karpenter
NodePool, read back from the rendered objects. :func:`check_schedulable` holds every pod
against every offer, the way the scheduler and the autoscalers would:

* the node selector names labels the nodes carry (a Karpenter requirement with values counts
  as a label taking one of them);
* every ``NoSchedule`` and ``NoExecute`` taint of the nodes is tolerated;
* the pod's requests (the larger of its containers' sum and its largest init container),
  times the pods the sizing packs onto a node, fit one node's allocatable resources,
  computed as the EKS AMI's kubelet and Karpenter compute them: capacity less kube-reserved
  (CPU by the kubelet's ranges, 11 MiB per pod + 255 MiB of memory, 1 GiB of disk), the
  hard eviction thresholds (100 MiB, 10% of the kubelet's file system) and, for Karpenter, the 7.5%
  of memory it holds back for the hypervisor until a node of the type has run. DaemonSets'
  requests are not modelled: they use what the pod sizing keeps back.

Each pod must fit a node of the pool it is placed on and of no other pool, so a pod that could
land on the wrong accelerator is a failure too. Problems are reported at once with their
field path: ``deployments.<i>.<object>.<path to the pod template>``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from eks_inference.catalog import GIB, INSTANCE_TYPES, InstanceType
from eks_inference.charts.contract import PlatformNeeds, PodNeed, Toleration
from eks_inference.charts.node_bootstrap import formats_instance_store
from eks_inference.names import NODE_POOL_LABEL
from eks_inference.specification.node_pools import NodePool, extended_resources
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.validation import Problems

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Karpenter's default share of memory kept back for the hypervisor (--vm-memory-overhead-percent),
# rendered into its Helm values by the Karpenter add-on so that both agree.
KARPENTER_VM_MEMORY_OVERHEAD = Fraction(75, 1000)
_MIB = 1024**2
# kube-reserved and hard eviction as the EKS AMI's nodeadm and Karpenter (kubeReservedResources,
# evictionThreshold in pkg/providers/instancetype/types.go, v1.14.1) compute them.
_KUBE_RESERVED_CPU_RANGES = (
    (0, 1000, Fraction(6, 100)),
    (1000, 2000, Fraction(1, 100)),
    (2000, 4000, Fraction(5, 1000)),
    (4000, 1 << 31, Fraction(25, 10000)),
)
_KUBE_RESERVED_MIB_PER_POD = 11
_KUBE_RESERVED_MIB_BASE = 255
_KUBE_RESERVED_EPHEMERAL = 1 * GIB
_EVICTION_MEMORY = 100 * _MIB
_EVICTION_ROOT_VOLUME_SHARE = Fraction(1, 10)
# Taint effects that keep a pod off a node (PreferNoSchedule only discourages).
_REPELLING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$"
)
_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


# Pods of a platform repeat the same few quantities, and every pod is checked against every
# pool: both functions below are pure, so each value is worked out once per process.
@functools.lru_cache(maxsize=4096)
def quantity(value: str) -> Fraction:
    """A Kubernetes quantity (``100m``, ``8Gi``, ``1e3``) as an exact number."""
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = match.groups()
    return Fraction(number) * _SUFFIXES[suffix or ""]


@dataclass(frozen=True)
class Taint:
    """A node taint as the scheduler matches it."""

    key: str
    value: str | None
    effect: str


@dataclass(frozen=True)
class NodeOffer:
    """The nodes one provisioner can start for a pool: what they carry and what they hold.

    ``labels`` maps each label to the values a node may carry (one, or one of several when a
    Karpenter requirement lists several); ``karpenter`` says whose memory model applies.
    """

    pool: str
    provisioner: str
    labels: Mapping[str, frozenset[str]]
    taints: tuple[Taint, ...]
    instance_types: tuple[str, ...]
    root_volume_gib: int
    karpenter: bool
    #: The nodes stripe their instance store and keep the kubelet's directory on it
    #: (:mod:`~eks_inference.charts.node_bootstrap`), so their ephemeral storage is the
    #: array's rather than the root volume's.
    instance_store: bool = False
    #: EFA interfaces attached to each node, which the EFA device plugin advertises.
    efa_interfaces: int = 0

    @property
    def accelerated(self) -> bool:
        return any(INSTANCE_TYPES[t].devices for t in self.instance_types)


def managed_offer(pool: NodePool) -> NodeOffer:
    """What the managed node group of ``pool`` offers (labels and taints set by EKS)."""
    labels = {key: frozenset({value}) for key, value in pool.labels.items()}
    labels[INSTANCE_TYPE_LABEL] = frozenset(pool.instance_types)
    return NodeOffer(
        pool=pool.name,
        provisioner=f"managed node group of pool {pool.name!r}",
        labels=labels,
        taints=tuple(Taint(t.key, t.value, t.effect) for t in pool.taints),
        instance_types=pool.instance_types,
        root_volume_gib=pool.root_volume_gib,
        karpenter=False,
        instance_store=formats_instance_store(pool),
        efa_interfaces=pool.efa_interfaces,
    )


@functools.cache
def allocatable(
    instance: InstanceType,
    root_volume_gib: int,
    *,
    karpenter: bool,
    instance_store: bool = False,
    efa_interfaces: int = 0,
) -> Mapping[str, Fraction]:
    """What pods may request of one node of ``instance``: capacity less reservations. The
    ephemeral storage is the kubelet's file system: the striped instance store with
    ``instance_store``, else the root volume; ``efa_interfaces`` are the EFA interfaces
    attached to it."""
    memory = Fraction(instance.memory_gib * GIB)
    if karpenter:
        memory -= math.ceil(memory * KARPENTER_VM_MEMORY_OVERHEAD / _MIB) * _MIB
    memory -= (_KUBE_RESERVED_MIB_PER_POD * instance.max_pods + _KUBE_RESERVED_MIB_BASE) * _MIB
    memory -= _EVICTION_MEMORY
    disk = Fraction((instance.local_nvme_gib if instance_store else root_volume_gib) * GIB)
    ephemeral = disk - _KUBE_RESERVED_EPHEMERAL - disk * _EVICTION_ROOT_VOLUME_SHARE
    cpu = Fraction(instance.vcpus) - _kube_reserved_cpu(instance.vcpus * 1000) / 1000
    amounts = {
        "cpu": cpu,
        "memory": memory,
        "ephemeral-storage": ephemeral,
        "pods": Fraction(instance.max_pods),
    }
    amounts.update(
        {name: Fraction(n) for name, n in extended_resources(instance, efa_interfaces).items()}
    )
    return amounts


def _kube_reserved_cpu(millicores: int) -> Fraction:
    reserved = Fraction(0)
    for start, end, share in _KUBE_RESERVED_CPU_RANGES:
        if millicores > start:
            reserved += (min(millicores, end) - start) * share
    return reserved


def pod_requests(need: PodNeed) -> dict[str, Fraction]:
    """A pod's effective requests: per resource, the larger of its containers' sum and its
    largest init container (init containers run one at a time, before the others)."""
    total: dict[str, Fraction] = {}
    for container in need.requests:
        for name, value in container:
            total[name] = total.get(name, Fraction(0)) + quantity(value)
    for container in need.init_requests:
        for name, value in container:
            total[name] = max(total.get(name, Fraction(0)), quantity(value))
    total["pods"] = Fraction(1)
    return total


def _tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    for t in tolerations:
        if t.effect is not None and t.effect != taint.effect:
            continue
        if t.operator == "Exists" and (t.key is None or t.key == taint.key):
            return True
        if t.operator == "Equal" and t.key == taint.key and (t.value or "") == (taint.value or ""):
            return True
    return False


def unmet(need: PodNeed, offer: NodeOffer) -> list[str]:
    """Why the nodes of ``offer`` cannot run the pod of ``need`` (empty: they can)."""
    reasons = []
    for key, value in need.node_selector:
        carried = offer.labels.get(key)
        if carried is None or value not in carried:
            shown = ", ".join(sorted(carried)) if carried else "no such label"
            reasons.append(f"it selects {key}={value}, which its nodes lack ({key}: {shown})")
    for taint in offer.taints:
        if taint.effect in _REPELLING_EFFECTS and not _tolerates(need.tolerations, taint):
            reasons.append(
                f"its nodes are tainted {taint.key}={taint.value or ''}:{taint.effect}, "
                "which it does not tolerate"
            )
    # As many pods as the sizing puts on one node must fit it together.
    requested = {name: amount * need.per_node for name, amount in pod_requests(need).items()}
    short: dict[str, list[str]] = {}
    for name in offer.instance_types:
        free = allocatable(
            INSTANCE_TYPES[name],
            offer.root_volume_gib,
            karpenter=offer.karpenter,
            instance_store=offer.instance_store,
            efa_interfaces=offer.efa_interfaces,
        )
        lacking = [
            f"{resource} {_show(resource, amount)} > {_show(resource, available)}"
            for resource, amount in sorted(requested.items())
            if amount > (available := free.get(resource, Fraction(0)))
        ]
        if lacking:
            short[name] = lacking
    if short and len(short) == len(offer.instance_types):
        detail = "; ".join(f"{t}: {', '.join(lacking)}" for t, lacking in short.items())
        pods = f"{need.per_node} such pods" if need.per_node > 1 else "its requests"
        reasons.append(f"{pods} exceed what one node can allocate ({detail})")
    return reasons


def _show(resource: str, amount: Fraction) -> str:
    if resource in ("memory", "ephemeral-storage"):
        return f"{float(amount / GIB):.1f}Gi"
    if resource == "cpu":
        return f"{float(amount):.2f}"
    return str(float(amount)).removesuffix(".0")


def check_schedulable(
    platform: PlatformSpec,
    needs: Mapping[str, PlatformNeeds],
    offers: Sequence[NodeOffer],
) -> None:
    """Raise ``ValidationError`` unless each pod of ``needs`` (by deployment name) fits a node
    of the pool it is placed on, and only of that pool.

    ``offers`` are every provisioner of the platform
    (:func:`eks_inference.charts.karpenter.platform_offers`).
    """
    problems = Problems("PlatformSpec")
    for index, deployment in enumerate(platform.deployments):
        for need in needs.get(deployment.name, PlatformNeeds()).pods:
            for message in pod_problems(need, offers):
                problems.add(("deployments", index, *need.path), message)
    problems.raise_if_any()


def pod_problems(need: PodNeed, offers: Sequence[NodeOffer]) -> list[str]:
    """What is wrong with where the pod of ``need`` can run: nowhere in its pool, or elsewhere."""
    own = [o for o in offers if o.pool == need.pool]
    if not own:
        return [f"it is placed on pool {need.pool!r}, which no provisioner of the platform starts"]
    fitting = {o.provisioner: unmet(need, o) for o in offers}
    problems = []
    if all(fitting[o.provisioner] for o in own):
        reasons = "; ".join(f"{o.provisioner}: {', '.join(fitting[o.provisioner])}" for o in own)
        problems.append(
            f"no node of pool {need.pool!r} can run this pod ({reasons}); make the pool offer "
            "what the pod selects, tolerates and requests, or place the pod elsewhere"
        )
    strays = [o for o in offers if o.pool != need.pool and not fitting[o.provisioner]]
    for stray in strays:
        problems.append(
            f"the pod is placed on pool {need.pool!r} but nodes of {stray.provisioner} can run "
            f"it too; it must select its pool's {NODE_POOL_LABEL} label and other pools must "
            "carry their own"
        )
    return problems
