"""``PlatformAddon``: the one way an add-on is made, whatever construct it is.

Every add-on is created as ``Addon(scope, construct_id, platform=platform, options=None)``:
on the :class:`~eks_inference.constructs.addons.registry.PlatformAddons` of a cluster, from an
options record whose every field has a documented default (aws-eks-v2's
``AlbControllerOptions``), so ``options`` is never needed and :attr:`PlatformAddon.options` is
what it was built with. An add-on is a construct of one of three kinds, each with a base that
does what they share and leaves the add-on its own part only:

* several resources (:class:`AddonConstruct`): the add-on implements
  :meth:`AddonConstruct._install`;
* one Helm release (:class:`~eks_inference.constructs.addons.helm.HelmAddon`): the add-on
  gives the release (``_release``);
* one EKS managed add-on (:class:`~eks_inference.constructs.eks_addon.EksAddon`): the add-on
  implements :meth:`PlatformAddon._build` itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Generic, TypeVar

from constructs import Construct
from jsii import JSIIAbstractClass

from eks_inference.constructs.addons.registry import PlatformAddons, Provides

OptionsT = TypeVar("OptionsT")


class PlatformAddon(Generic[OptionsT], ABC):
    """The add-ons' constructor: one signature, the options defaulted in one place.

    Set :attr:`OPTIONS` to the add-on's options record and, when it provides something a
    deployment may need, :attr:`PROVIDES`; implement :meth:`_build`. A subclass lists this
    class before the construct class it is, whose ``__init__`` :meth:`_build` calls.
    """

    OPTIONS: type[OptionsT]
    """The add-on's options record; ``OPTIONS()`` is every default."""
    PROVIDES: ClassVar[Provides] = Provides()
    """What the add-on can provide, for naming it when a deployment misses it (nothing)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        platform: PlatformAddons,
        options: OptionsT | None = None,
    ) -> None:
        self.options: OptionsT = options or self.OPTIONS()
        self._build(scope, construct_id, platform, self.options)

    @abstractmethod
    def _build(
        self, scope: Construct, construct_id: str, platform: PlatformAddons, options: OptionsT
    ) -> None:
        """Initialize the construct the add-on is, create what it installs, and register
        with ``platform`` what it provides."""


class AddonConstruct(PlatformAddon[OptionsT], Construct, metaclass=JSIIAbstractClass):
    """An add-on made of several resources, under a construct of its own.

    (jsii's abstract-class metaclass is the one both an abstract base and a construct take.)
    """

    def _build(
        self, scope: Construct, construct_id: str, platform: PlatformAddons, options: OptionsT
    ) -> None:
        Construct.__init__(self, scope, construct_id)
        self._install(platform, options)

    @abstractmethod
    def _install(self, platform: PlatformAddons, options: OptionsT) -> None:
        """Create the add-on's resources under it, and register what they provide."""
