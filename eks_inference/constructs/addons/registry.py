"""``PlatformAddons``: the record of what a cluster's add-ons provide, filled as they are made.

A chart records what it needs from the platform
(:class:`~eks_inference.charts.contract.PlatformNeeds`): custom resources, Secrets,
IngressClasses, Mountpoint volumes, nodes for its pods. Each add-on, when it is created,
records here what it provides and which construct provides it, so that a
:class:`~eks_inference.constructs.ModelDeployment` applies every manifest after what it needs,
and fails at synth, naming the add-on to add, when nothing provides it
(:func:`eks_inference.constructs.addons.require`). Nothing looks an add-on up by its type or
its construct path: the record is the one place a provider is found.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, TypeVar

from constructs import IConstruct

from eks_inference.charts.contract import PlatformNeeds, SecretNeed
from eks_inference.charts.ownership import ObjectOwners
from eks_inference.charts.scheduling import NodeOffer, managed_offer, pod_problems
from eks_inference.constructs.cluster import InferenceCluster
from eks_inference.specification.validation import Problems

_K = TypeVar("_K")
_V = TypeVar("_V")


class MountpointDriver(Protocol):
    """The cluster's Mountpoint for S3 CSI driver, as the deployments' volumes use it."""

    def grant_read(self, prefix: str) -> None:
        """Let the driver read ``prefix`` of the model bucket (idempotent)."""

    @property
    def dependencies(self) -> tuple[IConstruct, ...]:
        """What a Mountpoint volume must be applied after: the driver and its permissions."""


class NodeProvisioner(Protocol):
    """What launches the nodes of the pools that are not managed node groups (Karpenter)."""

    @property
    def offers(self) -> tuple[NodeOffer, ...]:
        """The nodes it can launch, for the scheduling check."""

    @property
    def node_pools(self) -> IConstruct:
        """What the workloads on its nodes are deleted before, so it removes the nodes."""


@dataclass(frozen=True)
class Provides:
    """What an add-on can provide, declared on its class (``PROVIDES``).

    Only for naming the add-on when a deployment needs something no add-on of its platform
    provides (:func:`eks_inference.constructs.addons.require`); what an add-on does provide
    is what it registers with :class:`PlatformAddons` when it is created.
    """

    crds: tuple[str, ...] = ()
    """CustomResourceDefinitions it installs, by name (``rayservices.ray.io``)."""
    secrets: tuple[SecretNeed, ...] = ()
    """Secrets it makes, for pods to read."""
    ingress_classes: tuple[str, ...] = ()
    """IngressClasses whose Ingresses it serves."""
    mountpoint: bool = False
    """Whether it is the Mountpoint for S3 CSI driver, which mounts bucket prefixes."""
    lustre: bool = False
    """Whether it is the FSx for Lustre CSI driver, which mounts FSx file systems."""
    nodes: bool = False
    """Whether it launches the nodes of pools that are not managed node groups."""
    namespaces: tuple[str, ...] = ()
    """Namespaces it creates, in which deployments place objects (an Ingress in the namespace
    of the gateway it routes to)."""

    def covers(self, needed: Provides) -> bool:
        """Whether everything ``needed`` declares is declared here too."""
        return (
            set(needed.crds) <= set(self.crds)
            and set(needed.namespaces) <= set(self.namespaces)
            and set(needed.secrets) <= set(self.secrets)
            and set(needed.ingress_classes) <= set(self.ingress_classes)
            and (self.mountpoint or not needed.mountpoint)
            and (self.lustre or not needed.lustre)
            and (self.nodes or not needed.nodes)
        )


class Provider(Protocol):
    """An add-on class that declares what it can provide."""

    PROVIDES: ClassVar[Provides]


@dataclass(eq=False)
class PlatformAddons:
    """What the add-ons of one :class:`InferenceCluster` provide, and which construct does.

    Create it with the cluster, hand it to every add-on (each registers what it provides,
    refusing a second provider of the same thing), then to every
    :class:`~eks_inference.constructs.ModelDeployment`, which applies each manifest after the
    providers of what it needs. :class:`~eks_inference.constructs.InferenceAddons` creates
    one with the add-ons every inference cluster needs (:attr:`InferenceAddons.platform`).
    """

    cluster: InferenceCluster
    """The cluster the add-ons run on; its managed node groups are the first node offers."""
    crd_installers: dict[str, IConstruct] = field(default_factory=dict)
    """CustomResourceDefinition name -> the construct that installs it (a Helm release that
    ships the CRD); instances of it are applied after it."""
    secret_makers: dict[SecretNeed, IConstruct] = field(default_factory=dict)
    """Secret -> the construct that makes it; pods reading it are applied after it, since
    they do not start without it."""
    ingress_controllers: dict[str, IConstruct] = field(default_factory=dict)
    """IngressClass -> the controller that serves it; Ingresses of the class are applied after
    it and deleted before it, so that it deletes the load balancer it made for them."""
    metrics: IConstruct | None = None
    """The metrics stack (Prometheus, Grafana, exporters, KEDA) that scrapes the deployments'
    monitors; ``None`` when the cluster has none and deployments go unobserved."""
    node_provisioner: NodeProvisioner | None = None
    """What launches the nodes of the pools that are not managed node groups (Karpenter);
    ``None`` when every pool is a managed node group."""
    mountpoint: MountpointDriver | None = None
    """The Mountpoint for S3 CSI driver: grants it read access to the prefixes volumes
    mount, and is what they are applied after."""
    namespace_makers: dict[str, IConstruct] = field(default_factory=dict)
    """Namespace -> the add-on construct that creates it, beyond the cluster's own (the
    inference namespace); objects in it are applied after it."""
    object_owners: ObjectOwners = field(default_factory=ObjectOwners)
    """The deployment that renders each object applied to the cluster: a second deployment
    rendering one of them is refused (:mod:`eks_inference.charts.ownership`)."""
    lustre: IConstruct | None = None
    """The FSx for Lustre CSI driver, which FSx volumes are applied after."""

    def add_crd_installer(self, crds: Iterable[str], installer: IConstruct) -> None:
        """Record that ``installer`` installs ``crds``; a CRD has one installer."""
        for crd in crds:
            _add_once(self.crd_installers, crd, installer, f"custom resource {crd!r}")

    def add_secret_maker(self, secret: SecretNeed, maker: IConstruct) -> None:
        """Record that ``maker`` makes ``secret``; a Secret has one maker."""
        _add_once(self.secret_makers, secret, maker, f"Secret {secret.namespace}/{secret.name}")

    def add_ingress_controller(self, ingress_class: str, controller: IConstruct) -> None:
        """Record that ``controller`` serves ``ingress_class``; a class has one controller."""
        _add_once(
            self.ingress_controllers, ingress_class, controller, f"IngressClass {ingress_class!r}"
        )

    def add_namespace_maker(self, namespace: str, maker: IConstruct) -> None:
        """Record that ``maker`` creates ``namespace``; a namespace has one maker."""
        _add_once(self.namespace_makers, namespace, maker, f"namespace {namespace!r}")

    def namespace(self, name: str) -> IConstruct | None:
        """What creates namespace ``name``: an add-on, or the cluster; ``None`` if nothing."""
        maker = self.namespace_makers.get(name)
        if maker is not None:
            return maker
        try:
            return self.cluster.namespace(name)
        except KeyError:
            return None

    def set_metrics(self, metrics: IConstruct) -> None:
        """Record the metrics stack; a cluster has one."""
        self.metrics = _set_once(self.metrics, metrics, "a metrics stack")

    def set_node_provisioner(self, provisioner: NodeProvisioner) -> None:
        """Record what launches the nodes beyond the managed node groups; a cluster has one."""
        self.node_provisioner = _set_once(self.node_provisioner, provisioner, "a node provisioner")

    def set_mountpoint(self, driver: MountpointDriver) -> None:
        """Record the Mountpoint for S3 CSI driver; a cluster has one."""
        self.mountpoint = _set_once(self.mountpoint, driver, "a Mountpoint for S3 CSI driver")

    def set_lustre(self, driver: IConstruct) -> None:
        """Record the FSx for Lustre CSI driver; a cluster has one."""
        self.lustre = _set_once(self.lustre, driver, "an FSx for Lustre CSI driver")

    def installs(self, crds: Iterable[str]) -> bool:
        """True when an add-on of the platform installs every one of ``crds``."""
        return all(crd in self.crd_installers for crd in crds)

    @property
    def node_offers(self) -> tuple[NodeOffer, ...]:
        """Every provisioner's nodes: the cluster's managed node groups, then the node
        provisioner's (:func:`~eks_inference.charts.scheduling.check_schedulable` holds each
        pod against them)."""
        managed = self.cluster.node_provisioning.managed_pools(self.cluster.node_pools)
        launched = self.node_provisioner.offers if self.node_provisioner is not None else ()
        return (*(managed_offer(pool) for pool in managed), *launched)

    def check_schedulable(self, needs: PlatformNeeds, *, deployment: str) -> None:
        """Raise ``ValidationError`` unless each pod of ``needs`` fits a node of the pool it
        is placed on, and of no other, among :attr:`node_offers`.

        The check of :func:`~eks_inference.charts.scheduling.check_schedulable`, for the pods
        of one deployment, with the problems under the pod templates' field paths.
        """
        offers = self.node_offers
        problems = Problems(f"deployment {deployment!r}")
        for need in needs.pods:
            for message in pod_problems(need, offers):
                problems.add(need.path, message)
        problems.raise_if_any()


def _set_once(current: _V | None, provider: _V, what: str) -> _V:
    if current is not None:
        raise ValueError(f"the platform already has {what}")
    return provider


def _add_once(registry: dict[_K, IConstruct], key: _K, provider: IConstruct, what: str) -> None:
    existing = registry.get(key)
    if existing is not None and existing is not provider:
        raise ValueError(f"{what} already has a provider: {existing.node.path}")
    registry[key] = provider
