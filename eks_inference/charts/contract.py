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
class PlatformNeeds:
    """Everything one chart (or all charts of a deployment) needs from the platform.

    - ``namespaces``: namespaces its objects are created in; they must exist first.
    - ``custom_resources``: names of the CustomResourceDefinitions its objects are instances
      of (``rayservices.ray.io``); whatever installs them must be applied first.
    - ``service_accounts``: identities its pods need (see :class:`ServiceAccountNeed`).
    - ``mounted_prefixes``: Mountpoint volumes it defines (see :class:`MountedPrefix`).
    """

    namespaces: tuple[str, ...] = ()
    custom_resources: tuple[str, ...] = ()
    service_accounts: tuple[ServiceAccountNeed, ...] = ()
    mounted_prefixes: tuple[MountedPrefix, ...] = ()

    def __add__(self, other: PlatformNeeds) -> PlatformNeeds:
        """Both sets of needs, each entry once, in the order first seen."""
        return PlatformNeeds(
            namespaces=_unique((*self.namespaces, *other.namespaces)),
            custom_resources=_unique((*self.custom_resources, *other.custom_resources)),
            service_accounts=_unique((*self.service_accounts, *other.service_accounts)),
            mounted_prefixes=_unique((*self.mounted_prefixes, *other.mounted_prefixes)),
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
