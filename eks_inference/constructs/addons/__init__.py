"""The add-ons of an inference cluster: one module per add-on, and the record they fill.

Each add-on is a construct with an options record whose fields document their defaults
(``KubeRay`` and ``KubeRayOptions``, in the style of aws-eks-v2's ``AlbController``): when it
is created it deploys what it installs and registers what it provides with the cluster's
:class:`~eks_inference.constructs.addons.registry.PlatformAddons`. Model deployments take that
record, apply each manifest after the providers of what it needs, and :func:`require` fails
at synth, naming the add-on to add, when nothing provides it.

* :mod:`~eks_inference.constructs.addons.neuron`: the Neuron device plugin and scheduler;
* :mod:`~eks_inference.constructs.addons.nvidia`: the NVIDIA device plugin;
* :mod:`~eks_inference.constructs.addons.efa`: the EFA device plugin (pools with ``efa``);
* :mod:`~eks_inference.constructs.addons.kuberay`: the KubeRay operator (RayService CRDs);
* :mod:`~eks_inference.constructs.addons.mountpoint`: the Mountpoint for S3 CSI driver;
* :mod:`~eks_inference.constructs.addons.fsx_csi`: the FSx for Lustre CSI driver;
* :mod:`~eks_inference.constructs.addons.cluster_autoscaler`: the Cluster Autoscaler;
* :mod:`~eks_inference.constructs.addons.karpenter`: Karpenter and its NodePools;
* :mod:`~eks_inference.constructs.addons.observability`: Prometheus, Grafana, exporters, KEDA;
* :mod:`~eks_inference.constructs.addons.load_balancer_controller`: the AWS Load Balancer
  Controller (the ``alb`` IngressClass);
* :mod:`~eks_inference.constructs.addons.api_keys`: the API key and the External Secrets
  Operator that syncs it;
* :mod:`~eks_inference.constructs.addons.kserve`: KServe on Knative Serving and Kourier, with
  cert-manager (``engine: kserve``);
* :mod:`~eks_inference.constructs.addons.inference_extension`: the InferencePool CRD
  (``routing`` with an endpoint picker);
* :mod:`~eks_inference.constructs.addons.leaderworkerset`: the LeaderWorkerSet controller
  (``multi_node``);
* :mod:`~eks_inference.constructs.addons.helm`: what their Helm releases share.

:class:`InferenceAddons` composes the add-ons every inference cluster needs.
"""

from __future__ import annotations

from collections.abc import Iterator

from constructs import Construct

from eks_inference.charts.contract import PlatformNeeds
from eks_inference.constructs.addons.api_keys import ApiKeys
from eks_inference.constructs.addons.cluster_autoscaler import ClusterAutoscaler
from eks_inference.constructs.addons.dynamo import DynamoPlatform, DynamoPlatformOptions
from eks_inference.constructs.addons.efa import EfaDevicePlugin
from eks_inference.constructs.addons.fsx_csi import FsxCsiDriver
from eks_inference.constructs.addons.inference_extension import InferenceExtension
from eks_inference.constructs.addons.karpenter import KarpenterNodeProvisioning
from eks_inference.constructs.addons.kserve import KServe
from eks_inference.constructs.addons.kuberay import KubeRay
from eks_inference.constructs.addons.leaderworkerset import LeaderWorkerSet
from eks_inference.constructs.addons.load_balancer_controller import LoadBalancerController
from eks_inference.constructs.addons.mountpoint import MountpointS3Csi
from eks_inference.constructs.addons.neuron import NeuronDevicePlugin
from eks_inference.constructs.addons.nvidia import NvidiaDevicePlugin
from eks_inference.constructs.addons.observability import InferenceObservability
from eks_inference.constructs.addons.registry import PlatformAddons, Provider, Provides
from eks_inference.constructs.cluster import InferenceCluster
from eks_inference.constructs.model_bucket import ModelBucket

# The add-ons that provide something a deployment's charts may need, in the order their
# names are suggested.
PROVIDERS: tuple[type[Provider], ...] = (
    KubeRay,
    MountpointS3Csi,
    FsxCsiDriver,
    KarpenterNodeProvisioning,
    InferenceObservability,
    LoadBalancerController,
    ApiKeys,
    KServe,
    DynamoPlatform,
    InferenceExtension,
    LeaderWorkerSet,
)


class InferenceAddons(Construct):
    """The add-ons every inference cluster needs, and the record of what they provide.

    Creates :attr:`platform` (a :class:`PlatformAddons` of ``cluster``) and, in this order,
    each registering with it:

    * :class:`NeuronDevicePlugin` (``Neuron``), only with a Neuron pool;
    * :class:`NvidiaDevicePlugin` (``NvidiaDevicePlugin``), only with a GPU pool;
    * :class:`EfaDevicePlugin` (``EfaDevicePlugin``), only with a pool with ``efa``;
    * :class:`KubeRay` (``KubeRayOperator``), installer of the RayService CRDs;
    * :class:`MountpointS3Csi` (``MountpointS3Csi``), reading ``model_bucket`` by prefix;
    * :class:`ClusterAutoscaler` (``ClusterAutoscaler``), only with managed node groups:
      with Karpenter, Karpenter adds and removes the nodes.

    The add-ons a platform may go without (:class:`KarpenterNodeProvisioning`,
    :class:`InferenceObservability`, :class:`LoadBalancerController`, :class:`ApiKeys`) are
    created beside it with the same ``platform``, before the deployments that need them.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: InferenceCluster,
        model_bucket: ModelBucket,
    ) -> None:
        super().__init__(scope, construct_id)
        self.platform = PlatformAddons(cluster)
        self.neuron = (
            NeuronDevicePlugin(self, "Neuron", platform=self.platform)
            if NeuronDevicePlugin.wanted(self.platform)
            else None
        )
        self.nvidia_device_plugin = (
            NvidiaDevicePlugin(self, "NvidiaDevicePlugin", platform=self.platform)
            if NvidiaDevicePlugin.wanted(self.platform)
            else None
        )
        self.efa_device_plugin = (
            EfaDevicePlugin(self, "EfaDevicePlugin", platform=self.platform)
            if EfaDevicePlugin.wanted(self.platform)
            else None
        )
        self.kuberay = KubeRay(self, "KubeRayOperator", platform=self.platform)
        self.mountpoint = MountpointS3Csi(
            self, "MountpointS3Csi", platform=self.platform, model_bucket=model_bucket
        )
        self.cluster_autoscaler = (
            ClusterAutoscaler(self, "ClusterAutoscaler", platform=self.platform)
            if cluster.node_provisioning.runs_cluster_autoscaler
            else None
        )


def require(platform: PlatformAddons, needs: PlatformNeeds, *, deployment: str) -> None:
    """Raise ``ValueError`` unless an add-on of ``platform`` provides each of ``needs``.

    The message names what ``deployment`` needs and the add-on that would provide it (from
    the ``PROVIDES`` of :data:`PROVIDERS`), so an app built from the constructs learns it at
    synth rather than from a pod that stays Pending or an Ingress nothing serves.
    """
    missing = [f"{what}; {_advice(provider)}" for what, provider in _unmet(platform, needs)]
    if missing:
        raise ValueError(f"deployment {deployment!r} needs " + "; and ".join(missing))


def _unmet(platform: PlatformAddons, needs: PlatformNeeds) -> Iterator[tuple[str, Provides]]:
    """Each of ``needs`` that no add-on of ``platform`` provides, described, with what an
    add-on that provides it declares."""
    for namespace in needs.namespaces:
        if platform.namespace(namespace) is None:
            yield (
                f"the namespace {namespace!r}, which neither the cluster nor an add-on of the "
                "platform creates",
                Provides(namespaces=(namespace,)),
            )
    for crd in needs.custom_resources:
        if crd not in platform.crd_installers:
            yield (
                f"the CRD {crd!r}, which no add-on of the platform installs",
                Provides(crds=(crd,)),
            )
    for secret in needs.secrets:
        if secret not in platform.secret_makers:
            yield (
                f"the Secret {secret.namespace}/{secret.name}, which no add-on of the platform "
                "makes",
                Provides(secrets=(secret,)),
            )
    for ingress_class in needs.ingress_classes:
        if ingress_class not in platform.ingress_controllers:
            yield (
                f"the IngressClass {ingress_class!r}, which no add-on of the platform serves",
                Provides(ingress_classes=(ingress_class,)),
            )
    if needs.mounted_prefixes and platform.mountpoint is None:
        prefixes = ", ".join(repr(volume.prefix) for volume in needs.mounted_prefixes)
        yield (
            f"Mountpoint volumes of {prefixes}, which no add-on of the platform mounts",
            Provides(mountpoint=True),
        )
    if needs.lustre_volumes and platform.lustre is None:
        yield (
            "FSx for Lustre volumes, which no add-on of the platform mounts",
            Provides(lustre=True),
        )
    offered = {offer.pool for offer in platform.node_offers}
    for pool in dict.fromkeys(need.pool for need in needs.pods):
        if pool not in offered:
            yield (
                f"nodes of pool {pool!r}, which is no managed node group and which no add-on "
                "of the platform launches",
                Provides(nodes=True),
            )


def _advice(needed: Provides) -> str:
    """Which add-on to add: those of :data:`PROVIDERS` that provide ``needed``, by name and
    import path."""
    names = [
        f"{cls.__name__} ({cls.__module__}.{cls.__qualname__})"
        for cls in PROVIDERS
        if cls.PROVIDES.covers(needed)
    ]
    if not names:
        return "register its provider with the platform's PlatformAddons"
    return f"add {' or '.join(names)}"


__all__ = [
    "PROVIDERS",
    "ApiKeys",
    "ClusterAutoscaler",
    "DynamoPlatform",
    "DynamoPlatformOptions",
    "EfaDevicePlugin",
    "FsxCsiDriver",
    "InferenceAddons",
    "InferenceExtension",
    "InferenceObservability",
    "KServe",
    "KarpenterNodeProvisioning",
    "KubeRay",
    "LeaderWorkerSet",
    "LoadBalancerController",
    "MountpointS3Csi",
    "NeuronDevicePlugin",
    "NvidiaDevicePlugin",
    "PlatformAddons",
    "require",
]
