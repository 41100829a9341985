"""The loader interface: what a deployment's ``weights.loader`` contributes to its servers.

Every engine reads the weights the same way, through :func:`loader_of`: whether the loader
needs the Mountpoint volume of the weights prefix (which
:func:`~eks_inference.charts.deployment.deployment_charts` then renders and hands the engine),
what the server is told the model is, the server flags and environment it adds, and the
identity the servers need to read the prefix themselves. Which engines may use which loader
on which accelerator is the engines' to say
(:meth:`~eks_inference.spec.engines.Engine.loaders`), checked when the spec validates.

- ``mountpoint``: the prefix is mounted read-only at :data:`MODEL_MOUNT_PATH` through the
  Mountpoint for S3 CSI driver, whose role reads it; the pods need no AWS access.
- ``runai_streamer``: vLLM streams ``s3://<bucket>/<prefix>`` into GPU memory with the Run:ai
  model streamer, with no volume: the fastest start, at the cost of an identity per server
  that reads the prefix.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import ClassVar

from eks_inference import names
from eks_inference.charts.common import MODEL_MOUNT_PATH
from eks_inference.charts.contract import ServiceAccountNeed
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.spec.deployment import ModelDeploymentSpec

# Run:ai streamer: 16 concurrent range reads saturate an S3 prefix's bandwidth on the
# network of a g6e node without throttling.
RUNAI_STREAMER_CONCURRENCY = 16


class WeightsLoader(ABC):
    """How servers read the weights: one subclass per ``weights.loader`` value."""

    #: The ``weights.loader`` value.
    name: ClassVar[str]
    #: Whether the servers read a mounted volume of the weights prefix.
    mounted: ClassVar[bool]

    @abstractmethod
    def model(self, spec: ModelDeploymentSpec, *, bucket_name: str) -> str:
        """What the server is told the model is: a path in the pod, or an S3 URI."""

    def server_args(self, spec: ModelDeploymentSpec) -> list[str]:
        """Flags of ``vllm serve`` the loader needs."""
        return []

    def environment(self, spec: ModelDeploymentSpec, *, region: str) -> dict[str, str]:
        """Environment variables of the server container the loader needs."""
        return {}

    def server_identities(
        self, spec: ModelDeploymentSpec, service_account: str
    ) -> tuple[ServiceAccountNeed, ...]:
        """The identity the servers need to read the weights themselves, if they do."""
        return ()


class MountpointLoader(WeightsLoader):
    """The prefix, mounted read-only at :data:`MODEL_MOUNT_PATH`; the driver's role reads it."""

    name = "mountpoint"
    mounted = True

    def model(self, spec: ModelDeploymentSpec, *, bucket_name: str) -> str:
        return MODEL_MOUNT_PATH


class RunaiStreamerLoader(WeightsLoader):
    """vLLM streams the prefix from S3 itself, with the servers' own Pod Identity role.

    The streamer's S3 client gets the region explicitly, so the pods need no instance
    metadata; credentials come from Pod Identity.
    """

    name = "runai_streamer"
    mounted = False

    def model(self, spec: ModelDeploymentSpec, *, bucket_name: str) -> str:
        return f"s3://{bucket_name}/{spec.weights.prefix}"

    def server_args(self, spec: ModelDeploymentSpec) -> list[str]:
        extra = json.dumps(
            {"concurrency": RUNAI_STREAMER_CONCURRENCY}, sort_keys=True, separators=(",", ":")
        )
        return ["--load-format", "runai_streamer", "--model-loader-extra-config", extra]

    def environment(self, spec: ModelDeploymentSpec, *, region: str) -> dict[str, str]:
        return {"AWS_REGION": region, "AWS_DEFAULT_REGION": region}

    def server_identities(
        self, spec: ModelDeploymentSpec, service_account: str
    ) -> tuple[ServiceAccountNeed, ...]:
        return (
            ServiceAccountNeed(
                role=names.SERVER_IDENTITY,
                name=service_account,
                namespace=INFERENCE_NAMESPACE,
                pods="Model servers",
                purpose=f"stream the weights under {spec.weights.prefix}",
                reads=(spec.weights.prefix,),
            ),
        )


LOADERS: dict[str, WeightsLoader] = {
    loader.name: loader for loader in (MountpointLoader(), RunaiStreamerLoader())
}


def loader_of(spec: ModelDeploymentSpec) -> WeightsLoader:
    """The loader of ``spec``'s weights: the one place that dispatches on ``weights.loader``."""
    return LOADERS[spec.weights.loader]
