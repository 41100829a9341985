"""The Gateway API Inference Extension's InferencePool CRD, for deployments with a picker.

A deployment whose ``routing`` names an endpoint picker renders an InferencePool
(:mod:`eks_inference.charts.routing`); the picker reads it. The Inference Extension ships its
CRDs as plain manifests, not as a Helm chart, so this add-on applies the pinned release's CRD
(``config/crd/bases/inference.networking.k8s.io_inferencepools.yaml`` at
:data:`~eks_inference.versions.INFERENCE_EXTENSION_VERSION`, packaged with the library so
that synth reads nothing from outside). No controller comes with it: the picker and its proxy
are the deployment's own objects, and no Gateway implementation is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar

import yaml
from aws_cdk import aws_eks_v2 as eks

from eks_inference import names
from eks_inference.constructs.addons.addon import AddonConstruct
from eks_inference.constructs.addons.registry import PlatformAddons, Provides

CRD_FILE = "inference.networking.k8s.io_inferencepools.yaml"


def inferencepool_crd() -> dict[str, Any]:
    """The pinned InferencePool CRD, as the package carries it."""
    text = resources.files("eks_inference.constructs").joinpath("data", CRD_FILE).read_text()
    crd: dict[str, Any] = yaml.safe_load(text)
    return crd


@dataclass(frozen=True)
class InferenceExtensionOptions:
    """How :class:`InferenceExtension` is installed (nothing to choose: the CRD of the
    pinned release, :data:`~eks_inference.versions.INFERENCE_EXTENSION_VERSION`)."""


class InferenceExtension(AddonConstruct[InferenceExtensionOptions]):
    """The InferencePool CRD (``inferencepools.inference.networking.k8s.io``), registered
    with the platform: a deployment's InferencePool is applied after it."""

    OPTIONS = InferenceExtensionOptions
    PROVIDES: ClassVar[Provides] = Provides(crds=(names.INFERENCEPOOL_CRD,))

    def _install(self, platform: PlatformAddons, options: InferenceExtensionOptions) -> None:
        self.manifest = eks.KubernetesManifest(
            self,
            "InferencePoolCrd",
            cluster=platform.cluster.eks_cluster,
            manifest=[inferencepool_crd()],
        )
        platform.add_crd_installer(self.PROVIDES.crds, self.manifest)
