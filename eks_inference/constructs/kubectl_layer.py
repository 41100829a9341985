"""The kubectl and Helm Lambda layer of a Kubernetes version, with which the cluster's kubectl
handler applies manifests, and the components pinned for each version."""

from __future__ import annotations

from importlib import import_module

from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from eks_inference import versions


def kubectl_layer(
    scope: Construct, construct_id: str, kubernetes_version: str
) -> lambda_.ILayerVersion:
    """The kubectl/helm Lambda layer that matches ``kubernetes_version``.

    Each Kubernetes minor version has its own layer package, each with a large layer asset
    and its own jsii assembly, so only the one for the cluster's version is imported.
    """
    release = kubernetes_release(kubernetes_version)
    try:
        module = import_module(release.kubectl_layer_module)
    except ModuleNotFoundError:
        package = release.kubectl_layer_module.replace("aws_cdk.", "aws-cdk.").replace("_", "-")
        raise ValueError(
            f"Kubernetes {kubernetes_version} needs the kubectl layer package {package}; "
            f"install it (pip install {package})"
        ) from None
    layer: lambda_.ILayerVersion = getattr(module, release.kubectl_layer_class)(scope, construct_id)
    return layer


def kubernetes_release(kubernetes_version: str) -> versions.KubernetesRelease:
    """The pinned components for a Kubernetes minor version, or a clear error."""
    release = versions.KUBERNETES_RELEASES.get(kubernetes_version)
    if release is None:
        supported = ", ".join(sorted(versions.KUBERNETES_RELEASES))
        raise ValueError(
            f"Kubernetes version {kubernetes_version!r} is not supported; use one of "
            f"{supported} (each needs a matching kubectl layer, Cluster Autoscaler and "
            "kube-scheduler, pinned in eks_inference.versions)"
        )
    return release
