"""The loader interface: what a deployment's ``weights.loader`` contributes to its servers.

Every engine reads the weights the same way, through :func:`loader_of`: which volume of the
weights the loader needs (:attr:`WeightsLoader.volume_kind`: a Mountpoint volume of the prefix,
an FSx for Lustre volume, or none; :func:`~eks_inference.charts.deployment.deployment_charts`
renders it and hands the engine its claim), what the pod gets from the loader
(:meth:`WeightsLoader.pod`: volumes, mounts and init containers), what the server is told the
model is, the server flags and environment it adds, and the identity the servers need to read
the prefix themselves. Which engines may use which loader on which accelerator is the
engines' to say (:meth:`~eks_inference.specification.engines.Engine.loaders`), checked when the spec
validates.

- ``mountpoint``: the prefix is mounted read-only at :data:`MODEL_MOUNT_PATH` through the
  Mountpoint for S3 CSI driver, whose role reads it; the pods need no AWS access.
- ``runai_streamer``: vLLM streams ``s3://<bucket>/<prefix>`` into GPU memory with the Run:ai
  model streamer, with no volume: the fastest start, at the cost of an identity per server
  that reads the prefix.
- ``image``: an init container of the weights image copies its directory into a local
  emptyDir, mounted read-only at :data:`MODEL_MOUNT_PATH` in the server. The serving image
  stays the pinned engine image (its flags are checked against that version), and any
  container runtime of the supported Kubernetes versions runs it (image volumes need 1.35 and
  a runtime that supports them). The copy costs local disk: the volume is bounded to the
  weights plus 10%, on NVMe where the node has it.
- ``fsx``: the deployment's FSx for Lustre file system, mounted read-only through the FSx CSI
  driver with the weights' directory at :data:`MODEL_MOUNT_PATH`; the pods need no AWS
  access (the file system reads the bucket through its data repository association).
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Literal

from eks_inference import names
from eks_inference.catalog import sizing
from eks_inference.charts import pod
from eks_inference.charts.contract import ServiceAccountNeed
from eks_inference.charts.model_server import MODEL_MOUNT_PATH, WEIGHTS_ROLE
from eks_inference.names import INFERENCE_NAMESPACE
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.weights_rules import CACHE_HEADROOM

# Run:ai streamer: 16 concurrent range reads saturate an S3 prefix's bandwidth on the
# network of a g6e node without throttling.
RUNAI_STREAMER_CONCURRENCY = 16
# The image loader's copy: one process streaming files, so a sliver of CPU and a small
# memory limit (the page cache it fills is reclaimable); requests equal limits keep the pod
# Guaranteed.
IMAGE_COPY_CONTAINER = "copy-weights"
IMAGE_COPY_CPU_MILLIS = 1000
IMAGE_COPY_MEMORY_MIB = 512
# The directory of an FSx for Lustre file system its data repository association links to the
# weights prefix; the server mounts just that directory (subPath) at the model path.
LUSTRE_WEIGHTS_DIRECTORY = "model"

VolumeKind = Literal["mountpoint", "lustre"]


@dataclass(frozen=True)
class LoaderPod:
    """What a loader adds to a server pod: volumes, the server's mounts, init containers."""

    volumes: tuple[pod.Json, ...] = ()
    mounts: tuple[pod.Json, ...] = ()
    init_containers: tuple[pod.Json, ...] = ()


class WeightsLoader(ABC):
    """How servers read the weights: one subclass per ``weights.loader`` value."""

    #: The ``weights.loader`` value.
    name: ClassVar[str]
    #: The volume of the weights the servers mount, if any.
    volume_kind: ClassVar[VolumeKind | None] = None

    @property
    def mounted(self) -> bool:
        """Whether the servers mount a volume of the weights (a claim)."""
        return self.volume_kind is not None

    def check_volume(self, spec: ModelDeploymentSpec, *, given: bool) -> None:
        """Refuse a weights volume given where the loader mounts none, or missing where it
        mounts one: a caller's mistake, not the spec's."""
        if given != self.mounted:
            raise ValueError(
                f"deployment {spec.name!r} loads weights with {self.name}: pass a "
                "weights volume exactly when the loader mounts one"
            )

    def pod(self, spec: ModelDeploymentSpec, claim: str | None) -> LoaderPod:
        """Volumes, mounts and init containers of a server pod; ``claim`` is the weights
        volume's claim when the loader mounts one. By default the claim, read-only at
        :data:`MODEL_MOUNT_PATH`."""
        if claim is None:
            return LoaderPod()
        return LoaderPod(
            volumes=(pod.claim_volume(WEIGHTS_ROLE, claim),),
            mounts=(pod.mount(WEIGHTS_ROLE, MODEL_MOUNT_PATH, read_only=True),),
        )

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
    volume_kind = "mountpoint"

    def model(self, spec: ModelDeploymentSpec, *, bucket_name: str) -> str:
        return MODEL_MOUNT_PATH


class RunaiStreamerLoader(WeightsLoader):
    """vLLM streams the prefix from S3 itself, with the servers' own Pod Identity role.

    The streamer's S3 client gets the region explicitly, so the pods need no instance
    metadata; credentials come from Pod Identity.
    """

    name = "runai_streamer"

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


class ImageLoader(WeightsLoader):
    """An init container of the weights image copies them into a bounded local volume.

    The init container runs the weights image (pinned by digest) with the same confinement as
    the server, ``cp -R <path>/. /mnt/model``; the server mounts the volume read-only. The
    volume is an emptyDir bounded to the weights plus 10%: on the NVMe instance store where
    the node has one (the node bootstrap puts the kubelet's volumes there), so the copy runs
    at local-disk speed.
    """

    name = "image"

    def model(self, spec: ModelDeploymentSpec, *, bucket_name: str) -> str:
        return MODEL_MOUNT_PATH

    def pod(self, spec: ModelDeploymentSpec, claim: str | None) -> LoaderPod:
        image = spec.weights.image
        if image is None:
            raise ValueError(f"deployment {spec.name!r}: loader image without weights.image")
        gib = sizing.gib(sizing.weight_bytes(spec.model.architecture)) * CACHE_HEADROOM
        copy = {
            "name": IMAGE_COPY_CONTAINER,
            "image": image.reference,
            "imagePullPolicy": pod.PULL_IF_NOT_PRESENT,
            "command": ["cp", "-R", f"{image.path.rstrip('/')}/.", MODEL_MOUNT_PATH],
            "resources": pod.resources(
                {"cpu": f"{IMAGE_COPY_CPU_MILLIS}m", "memory": f"{IMAGE_COPY_MEMORY_MIB}Mi"}
            ),
            "securityContext": dict(pod.ROOT_IMAGE_SECURITY),
            "volumeMounts": [pod.mount(WEIGHTS_ROLE, MODEL_MOUNT_PATH)],
        }
        return LoaderPod(
            volumes=(pod.empty_dir(WEIGHTS_ROLE, f"{math.ceil(gib)}Gi"),),
            mounts=(pod.mount(WEIGHTS_ROLE, MODEL_MOUNT_PATH, read_only=True),),
            init_containers=(copy,),
        )


class LustreLoader(WeightsLoader):
    """The deployment's FSx for Lustre volume: its weights directory, read-only, at
    :data:`MODEL_MOUNT_PATH`."""

    name = "fsx"
    volume_kind = "lustre"

    def model(self, spec: ModelDeploymentSpec, *, bucket_name: str) -> str:
        return MODEL_MOUNT_PATH

    def pod(self, spec: ModelDeploymentSpec, claim: str | None) -> LoaderPod:
        if claim is None:
            raise ValueError(f"deployment {spec.name!r}: loader fsx without its volume")
        mount = pod.mount(WEIGHTS_ROLE, MODEL_MOUNT_PATH, read_only=True)
        return LoaderPod(
            volumes=(pod.claim_volume(WEIGHTS_ROLE, claim),),
            mounts=({**mount, "subPath": LUSTRE_WEIGHTS_DIRECTORY},),
        )


LOADERS: dict[str, WeightsLoader] = {
    loader.name: loader
    for loader in (MountpointLoader(), RunaiStreamerLoader(), ImageLoader(), LustreLoader())
}


def loader_of(spec: ModelDeploymentSpec) -> WeightsLoader:
    """The loader of ``spec``'s weights: the one place that dispatches on ``weights.loader``."""
    return LOADERS[spec.weights.loader]
