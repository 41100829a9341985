"""What a deployment's charts need from the platform: the contract from charts to constructs.

A chart renders plain Kubernetes objects, and some of them only work once the platform has
done its part: the namespace exists, an operator has installed the custom resource
definitions, a service account's pods can assume an IAM role that reads or writes their
prefixes, the Mountpoint driver may read the prefixes a volume mounts. The code that creates
each such object records the need here, in a frozen :class:`PlatformNeeds`, and the CDK
constructs read that record: they never parse the rendered objects to find out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

_T = TypeVar("_T")


@dataclass(frozen=True)
class MountedPrefix:
    """A Mountpoint for S3 volume: the bucket prefix it mounts, and how.

    ``volume_name`` is the cluster-scoped PersistentVolume, ``claim_name`` the claim pods
    mount. The Mountpoint driver reads with its own identity, so the prefix is what it must be
    allowed to read; ``read_only`` volumes are the only kind the platform grants.
    """

    prefix: str
    volume_name: str
    claim_name: str
    read_only: bool


@dataclass(frozen=True)
class LustreVolumeNeed:
    """An FSx for Lustre volume: its file system must exist and the FSx CSI driver run.

    ``volume_name`` is the cluster-scoped PersistentVolume, ``claim_name`` the claim pods
    mount, ``file_system_id`` the file system (its id, or a token of the one the stack
    creates).
    """

    volume_name: str
    claim_name: str
    file_system_id: str


@dataclass(frozen=True)
class ServiceAccountNeed:
    """A service account whose pods call AWS with their own identity (Pod Identity).

    ``role`` names the identity within the deployment (``server``, ``compile``); ``pods`` says
    whose it is and ``purpose`` what they do with it (for the IAM role's description). ``reads`` are
    bucket prefixes its pods may list and read, ``writes`` prefixes they may write; a service
    account with neither needs no role and is not recorded.
    """

    role: str
    name: str
    namespace: str
    pods: str
    purpose: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SecretNeed:
    """A Kubernetes Secret that pods read and that the platform must create.

    The chart only refers to it (an environment variable from ``name``/``key``); the
    platform makes it, such as the API key the External Secrets Operator syncs from AWS
    Secrets Manager. Pods whose Secret is missing do not start, so its maker comes first.
    """

    name: str
    namespace: str
    key: str


@dataclass(frozen=True)
class Toleration:
    """A pod toleration as the pod spec writes it (``None`` where a field is left out)."""

    key: str | None
    operator: str
    value: str | None
    effect: str | None


@dataclass(frozen=True)
class PodNeed:
    """A pod template, and what a node must offer to run it.

    ``path`` is where the template is: its object (``RayService/<name>``) and the fields down
    to it (``spec``, ``rayClusterConfig``, ``workerGroupSpecs``, 0, ``template``); ``pool``
    the node pool the pod is placed on. The rest is what scheduling looks at: the node
    selector, the tolerations, each container's resource requests (sidecars the operator
    adds included) and each init container's, as quantity strings; ``per_node`` is how many
    such pods the sizing packs onto one node (a node's share per replica).
    """

    path: tuple[str | int, ...]
    pool: str
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[Toleration, ...]
    requests: tuple[tuple[tuple[str, str], ...], ...]
    init_requests: tuple[tuple[tuple[str, str], ...], ...] = ()
    per_node: int = 1


@dataclass(frozen=True)
class PlatformNeeds:
    """Everything one chart (or all charts of a deployment) needs from the platform.

    - ``namespaces``: namespaces its objects are created in; they must exist first.
    - ``custom_resources``: names of the CustomResourceDefinitions its objects are instances
      of (``rayservices.ray.io``); whatever installs them must be applied first.
    - ``service_accounts``: identities its pods need (see :class:`ServiceAccountNeed`).
    - ``mounted_prefixes``: Mountpoint volumes it defines (see :class:`MountedPrefix`).
    - ``lustre_volumes``: FSx for Lustre volumes it defines (see :class:`LustreVolumeNeed`).
    - ``secrets``: Secrets its pods read, made by the platform (see :class:`SecretNeed`).
    - ``ingress_classes``: IngressClasses its Ingresses name; the controller behind each must
      run before they are applied and outlive them (it deletes the load balancer).
    - ``pods``: its pod templates, which some node pool's nodes must be able to run
      (see :class:`PodNeed`).
    - ``images``: images its pods run that the CDK app builds, by name
      (:data:`~eks_inference.serve.image.NEURON_RAY_IMAGE`).
    """

    namespaces: tuple[str, ...] = ()
    custom_resources: tuple[str, ...] = ()
    service_accounts: tuple[ServiceAccountNeed, ...] = ()
    mounted_prefixes: tuple[MountedPrefix, ...] = ()
    lustre_volumes: tuple[LustreVolumeNeed, ...] = ()
    secrets: tuple[SecretNeed, ...] = ()
    ingress_classes: tuple[str, ...] = ()
    pods: tuple[PodNeed, ...] = ()
    images: tuple[str, ...] = ()

    def __add__(self, other: PlatformNeeds) -> PlatformNeeds:
        """Both sets of needs, each entry once, in the order first seen."""
        return PlatformNeeds(
            namespaces=_unique((*self.namespaces, *other.namespaces)),
            custom_resources=_unique((*self.custom_resources, *other.custom_resources)),
            service_accounts=_unique((*self.service_accounts, *other.service_accounts)),
            mounted_prefixes=_unique((*self.mounted_prefixes, *other.mounted_prefixes)),
            lustre_volumes=_unique((*self.lustre_volumes, *other.lustre_volumes)),
            secrets=_unique((*self.secrets, *other.secrets)),
            ingress_classes=_unique((*self.ingress_classes, *other.ingress_classes)),
            pods=_unique((*self.pods, *other.pods)),
            images=_unique((*self.images, *other.images)),
        )

    @staticmethod
    def combined(needs: Iterable[PlatformNeeds]) -> PlatformNeeds:
        """The union of ``needs``."""
        total = PlatformNeeds()
        for need in needs:
            total = total + need
        return total


def _unique(items: tuple[_T, ...]) -> tuple[_T, ...]:
    return tuple(dict.fromkeys(items))
