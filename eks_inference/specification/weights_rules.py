"""The rules of the weights loaders that read more than the ``weights`` field, and local disk.

A deployment's own rules (:func:`image_size_problem`, :func:`mountpoint_cache_problem`) read
its model and instance type; the platform's (:func:`lustre_zone_problems`) read the node pool
the deployment runs on. Each names the field to change and what would work.

The Mountpoint cache is an emptyDir of the Mountpoint pod, so it lives where the kubelet keeps
pods' volumes: on the NVMe instance store where the instance has one (the node bootstrap
mounts it there), otherwise on the root EBS volume beside the images.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from eks_inference.catalog import GB, GIB, sizing
from eks_inference.catalog.node_hardware import node_hardware
from eks_inference.specification.validation import Problems

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec
    from eks_inference.specification.node_pools import NodePool

# Image-baked weights: the design documents' "tiny models (< 5 GB)". At the published pull
# rate (8.8 GB in 48 s) 5 GB adds 27 s to every node's start, about a node launch; larger
# weights start faster streamed or mounted, and an image per model release couples the
# model's release cycle to the image's.
IMAGE_WEIGHTS_MAX_BYTES = 5 * GB
# The Mountpoint cache holds the whole object set (weights plus 10%), so that pods sharing a
# node (three Ray workers on one inf2.48xlarge) and restarted pods read from local disk
# instead of S3. On the root volume (200 GiB on accelerator pools by default, shared with the
# images) it is at most 64 GiB: above that a model is read once per node and the cache would
# only crowd the disk. On NVMe it may take what the images leave.
CACHE_HEADROOM = 1.1
CACHE_MIN_GIB = 4
EBS_CACHE_MAX_GIB = 64


def ebs_cache_gib(object_set_gib: float) -> int:
    """A cache on the root volume for objects totalling ``object_set_gib``."""
    return max(CACHE_MIN_GIB, min(EBS_CACHE_MAX_GIB, math.ceil(object_set_gib * CACHE_HEADROOM)))


def nvme_cache_budget_gib(instance_type: str) -> int:
    """What the instance store leaves for caches once the images and system take their share
    (0: no instance store)."""
    hardware = node_hardware(instance_type)
    if not hardware.has_instance_store:
        return 0
    return int(hardware.instance_store_bytes / GIB) - sizing.NODE_IMAGE_AND_SYSTEM_GIB


def mountpoint_cache_gib(spec: ModelDeploymentSpec) -> int:
    """The Mountpoint cache of ``spec``'s volumes: ``weights.cache_gib``, or the object set
    plus 10%, bounded by the disk it lives on."""
    if spec.weights.cache_gib is not None:
        return spec.weights.cache_gib
    weights = sizing.gib(sizing.weight_bytes(spec.model.architecture))
    budget = nvme_cache_budget_gib(spec.instance_type)
    if budget <= 0:
        return ebs_cache_gib(weights)
    return max(CACHE_MIN_GIB, min(budget, math.ceil(weights * CACHE_HEADROOM)))


def image_size_problem(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """``loader: image`` carries small models only (:data:`IMAGE_WEIGHTS_MAX_BYTES`)."""
    if spec.weights.loader != "image":
        return
    size = sizing.weight_bytes(spec.model.architecture)
    if size <= IMAGE_WEIGHTS_MAX_BYTES:
        return
    problems.add(
        ("weights", "loader"),
        f"loader: image carries at most {IMAGE_WEIGHTS_MAX_BYTES // GB} GB of weights "
        f"(the design documents' tiny models), and {spec.model.id} has {size / GB:.1f} GB: "
        "every node would pull them before serving; use loader: runai_streamer or mountpoint",
        spec.weights.loader,
    )


def mountpoint_cache_problem(spec: ModelDeploymentSpec, problems: Problems) -> None:
    """An explicit Mountpoint cache fits the disk it lives on."""
    cache = spec.weights.cache_gib
    if cache is None:
        return
    budget = nvme_cache_budget_gib(spec.instance_type)
    if budget > 0 and cache > budget:
        hardware = node_hardware(spec.instance_type)
        problems.add(
            ("weights", "cache_gib"),
            f"a {cache} GiB Mountpoint cache does not fit the {hardware.instance_store_gb} GB "
            f"NVMe instance store of {spec.instance_type} beside "
            f"{sizing.NODE_IMAGE_AND_SYSTEM_GIB} GiB of images and system; set cache_gib <= "
            f"{budget}, or use a larger instance type",
            cache,
        )
    elif budget <= 0 and cache > EBS_CACHE_MAX_GIB:
        problems.add(
            ("weights", "cache_gib"),
            f"{spec.instance_type} has no NVMe instance store: the Mountpoint cache shares the "
            f"root volume with the images; set cache_gib <= {EBS_CACHE_MAX_GIB}, or use an "
            "instance type with local NVMe (g6e)",
            cache,
        )


def lustre_zone_problems(
    deployment: ModelDeploymentSpec, pool: NodePool, pool_index: int, problems: Problems
) -> None:
    """An FSx for Lustre file system lives in one Availability Zone: the pool serving from it
    must run there only (``zones``: one index), or every node elsewhere fails to mount it."""
    if deployment.weights.loader != "fsx" or len(pool.zones) == 1:
        return
    spans = (
        f"spans zones {list(pool.zones)}"
        if pool.zones
        else "spans every zone of the VPC (no zones set)"
    )
    problems.add(
        ("node_pools", pool_index, "zones"),
        f"deployment {deployment.name!r} reads its weights from FSx for Lustre, which lives "
        f"in one Availability Zone, but pool {pool.name!r} {spans}; set zones: [0] (or the "
        "one zone index its file system is in), with a separate pool for other zones",
        list(pool.zones),
    )
