"""How a deployment's pods read its weights: the loader it names and that loader's options.

The loader is one typed option every engine reads the same way. Which loaders an engine
supports on which accelerator is the engine's to say
(:meth:`~eks_inference.specification.engines.Engine.loaders`); what a loader contributes to a pod
(volumes, init containers, the model path and arguments, the identity that reads the prefix)
is built in one place, :mod:`eks_inference.charts.weights_loaders`; how long each takes to bring a
model up is :mod:`eks_inference.specification.cold_start`.

- ``mountpoint``: the prefix mounted read-only through the Mountpoint for S3 CSI driver.
- ``runai_streamer``: vLLM streams ``s3://`` into GPU memory itself, with no volume.
- ``image``: the weights are files in a container image (:class:`WeightsImage`), pinned by
  digest, copied by an init container into a local volume the server reads.
- ``fsx``: the prefix is imported into an FSx for Lustre file system (:class:`Lustre`) by a
  data repository association, mounted through the FSx CSI driver.

``prefix`` is required for every loader: it is where ``eks-inference upload`` puts the weights
and ``preflight`` verifies them, what FSx imports, and, for ``image``, what the image is built
from (its servers never read the bucket).
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from eks_inference.specification.aws_types import KeyPrefix
from eks_inference.specification.validation import Problems

Loader = Literal["mountpoint", "runai_streamer", "image", "fsx"]
LOADERS: tuple[Loader, ...] = ("mountpoint", "runai_streamer", "image", "fsx")

# An image reference pinned by digest: [registry/]repository[:tag]@sha256:<64 hex>. A tag may
# be given for the reader, but only the digest decides what is pulled.
_IMAGE_REPOSITORY = r"[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*"
_IMAGE_REGISTRY = r"[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:\d+)?/"
_IMAGE_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
PINNED_IMAGE = re.compile(
    rf"^({_IMAGE_REGISTRY})?{_IMAGE_REPOSITORY}(:{_IMAGE_TAG})?@sha256:[0-9a-f]{{64}}$"
)
_TAGGED_IMAGE = re.compile(rf"^({_IMAGE_REGISTRY})?{_IMAGE_REPOSITORY}(:{_IMAGE_TAG})?$")
# An absolute path of plain segments: no '..', no empty segment, no shell or glob characters
# (the init container's argv carries it, never a shell).
_IMAGE_PATH = re.compile(r"^(/[A-Za-z0-9._-]+)+/?$")

# FSx for Lustre, PERSISTENT_2 (the deployment type that supports data repository
# associations; FSx for Lustre user guide, "Deployment options" and "Linking your file system
# to an S3 bucket"): storage in 1,200 GiB steps for the first two, then 2,400 GiB steps.
LUSTRE_MIN_CAPACITY_GIB = 1200
LUSTRE_CAPACITY_STEP_GIB = 2400
LUSTRE_MAX_CAPACITY_GIB = 2400 * 1000
LustreThroughput = Literal[125, 250, 500, 1000]
LUSTRE_THROUGHPUTS: tuple[int, ...] = (125, 250, 500, 1000)
# The file system holds the model with a fifth to spare: safetensors indexes and configs,
# and a second revision imported beside the first during a rollout.
LUSTRE_HEADROOM = 1.2
# Default throughput tier: the lowest at which the default capacity reads the weights in at
# most this long, so an FSx start stays within the Run:ai streamer's order of magnitude.
LUSTRE_TARGET_READ_SECONDS = 30
_FILE_SYSTEM_ID = r"^fs-[0-9a-f]{8,17}$"


class WeightsImage(BaseModel):
    """A container image holding the weights, and the directory in it that holds them.

    ``reference`` must be pinned by digest (``repo@sha256:...``, a tag beside it is allowed
    and ignored): a tag can be moved to other weights without any change here. The image runs
    as an init container that copies ``path`` into the pod's local weights volume, so it must
    contain ``cp`` (build it ``FROM`` a minimal base such as busybox, pinned by digest too).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reference: str = Field(
        max_length=512,
        description="Image reference pinned by digest: [registry/]repository[:tag]@sha256:<hex>.",
    )
    path: str = Field(
        max_length=512,
        description="Absolute directory in the image holding config.json and the safetensors.",
    )


class Lustre(BaseModel):
    """An FSx for Lustre file system holding the weights prefix.

    Created by the stack (the default), linked to the model bucket by a data repository
    association on the deployment's prefix, in the one Availability Zone of the deployment's
    node pool; or imported with ``file_system_id``, ``dns_name`` and ``mount_name`` (then you
    own the association). Capacity defaults to the smallest FSx offers that holds the weights
    with :data:`LUSTRE_HEADROOM`; throughput per TiB to the lowest tier that reads them in
    :data:`LUSTRE_TARGET_READ_SECONDS` at that capacity.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment_type: Literal["PERSISTENT_2"] = Field(
        default="PERSISTENT_2",
        description="PERSISTENT_2: the FSx for Lustre type that takes data repository "
        "associations.",
    )
    storage_capacity_gib: int | None = Field(
        default=None,
        ge=LUSTRE_MIN_CAPACITY_GIB,
        le=LUSTRE_MAX_CAPACITY_GIB,
        description="1200, 2400, then multiples of 2400 GiB; default: the smallest that holds "
        "the weights with 20% headroom.",
    )
    throughput_per_tib: LustreThroughput | None = Field(
        default=None,
        description="MB/s per TiB of storage (125, 250, 500 or 1000); default: the lowest "
        "that reads the weights in 30 s.",
    )
    file_system_id: str | None = Field(
        default=None, pattern=_FILE_SYSTEM_ID, description="Import this file system (fs-...)."
    )
    dns_name: str | None = Field(
        default=None, max_length=253, description="Imported file system's DNS name."
    )
    mount_name: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]{1,8}$",
        description="Imported file system's mount name.",
    )

    @model_validator(mode="after")
    def _check(self) -> Lustre:
        problems = Problems("Lustre")
        imported = (self.file_system_id, self.dns_name, self.mount_name)
        if any(v is not None for v in imported) and any(v is None for v in imported):
            problems.add(
                ("file_system_id",),
                "an imported file system needs file_system_id, dns_name and mount_name "
                "together (aws fsx describe-file-systems lists them); give all three, or none "
                "to let the stack create one",
            )
        capacity = self.storage_capacity_gib
        if capacity is not None and not valid_lustre_capacity(capacity):
            problems.add(
                ("storage_capacity_gib",),
                f"FSx for Lustre takes 1200, 2400 or a multiple of 2400 GiB, not {capacity}; "
                f"use {next_lustre_capacity(capacity)}",
                capacity,
            )
        problems.raise_if_any()
        return self

    @property
    def imported(self) -> bool:
        return self.file_system_id is not None


def valid_lustre_capacity(gib: int) -> bool:
    """Whether FSx for Lustre (PERSISTENT_2) offers ``gib`` of storage."""
    return gib == LUSTRE_MIN_CAPACITY_GIB or (gib > 0 and gib % LUSTRE_CAPACITY_STEP_GIB == 0)


def next_lustre_capacity(gib: float) -> int:
    """The smallest capacity FSx for Lustre offers that holds ``gib``."""
    if gib <= LUSTRE_MIN_CAPACITY_GIB:
        return LUSTRE_MIN_CAPACITY_GIB
    return math.ceil(gib / LUSTRE_CAPACITY_STEP_GIB) * LUSTRE_CAPACITY_STEP_GIB


def lustre_capacity_gib(lustre: Lustre, weights_gib: float) -> int:
    """The file system's capacity: as given, or the smallest that holds the weights."""
    if lustre.storage_capacity_gib is not None:
        return lustre.storage_capacity_gib
    return next_lustre_capacity(weights_gib * LUSTRE_HEADROOM)


def lustre_throughput_per_tib(lustre: Lustre, weights_gib: float) -> int:
    """MB/s per TiB: as given, or the lowest tier reading the weights in the target time."""
    if lustre.throughput_per_tib is not None:
        return lustre.throughput_per_tib
    tib = lustre_capacity_gib(lustre, weights_gib) / 1024
    needed = weights_gib * 1.073741824 * 1000 / LUSTRE_TARGET_READ_SECONDS  # MB/s
    for tier in LUSTRE_THROUGHPUTS:
        if tier * tib >= needed:
            return tier
    return LUSTRE_THROUGHPUTS[-1]


class Weights(BaseModel):
    """Where the weights are in the model bucket and how pods read them.

    ``mountpoint`` mounts the prefix read-only through the Mountpoint for S3 CSI driver (any
    engine); ``runai_streamer`` lets standalone vLLM on GPUs stream ``s3://`` directly, with
    no volume at all, which starts fastest; ``image`` copies them from a container image
    (``image``), for small models and disconnected clusters; ``fsx`` reads them from an FSx
    for Lustre file system (``fsx``) in the node pool's Availability Zone.
    ``cache_gib`` sizes the Mountpoint local cache (default: the weights plus 10%, within
    bounds that depend on the node's disk).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix: KeyPrefix = Field(description="Key prefix in the model bucket, ending '/'.")
    loader: Loader = "mountpoint"
    image: WeightsImage | None = Field(
        default=None, description="loader: image only: the image holding the weights."
    )
    fsx: Lustre | None = Field(
        default=None, description="loader: fsx only: the file system (default: created)."
    )
    cache_gib: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="loader: mountpoint only: local cache size in GiB.",
    )

    @model_validator(mode="after")
    def _check(self) -> Weights:
        problems = Problems("Weights")
        if self.loader == "image":
            if self.image is None:
                problems.add(
                    ("image",),
                    "loader: image needs image: {reference: <repo>@sha256:<digest>, path: "
                    "<directory in the image>}",
                )
        elif self.image is not None:
            problems.add(("image",), f"image applies to loader: image only, not {self.loader}")
        if self.fsx is not None and self.loader != "fsx":
            problems.add(("fsx",), f"fsx applies to loader: fsx only, not {self.loader}")
        if self.cache_gib is not None and self.loader != "mountpoint":
            problems.add(
                ("cache_gib",),
                f"cache_gib sizes the Mountpoint cache; loader {self.loader} has none: remove it",
                self.cache_gib,
            )
        if self.image is not None:
            _check_image(self.image, problems)
        problems.raise_if_any()
        return self

    @property
    def lustre(self) -> Lustre:
        """The FSx options, defaulted (loader: fsx)."""
        return self.fsx or Lustre()


def unpinned_image_problem(reference: str, why: str) -> str | None:
    """What is wrong with an image ``reference`` that is not pinned by digest, with the fix
    (``why`` says what a tag could change); ``None`` for a pinned one."""
    if PINNED_IMAGE.fullmatch(reference):
        return None
    if _TAGGED_IMAGE.fullmatch(reference):
        fix = (
            f"pin it by digest: {reference}@sha256:<digest> (docker buildx imagetools "
            f"inspect {reference} prints it)"
        )
    else:
        fix = "use [registry/]repository[:tag]@sha256:<64 hex digits>"
    return f"{reference!r} is not pinned by digest ({why}); {fix}"


def _check_image(image: WeightsImage, problems: Problems) -> None:
    reference = image.reference
    problem = unpinned_image_problem(reference, "a tag can later name other weights")
    if problem is not None:
        problems.add(("image", "reference"), problem, reference)
    if not _IMAGE_PATH.match(image.path) or "/../" in f"{image.path}/" or "/./" in image.path:
        problems.add(
            ("image", "path"),
            f"{image.path!r} must be an absolute directory of plain names (letters, digits, "
            "'.', '_', '-'), e.g. /models/qwen2.5-1.5b",
            image.path,
        )
