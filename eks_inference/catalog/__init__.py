"""Data the library sizes and prices with: instance types and model architectures."""

from eks_inference.catalog.instances import (
    GB,
    GIB,
    INSTANCE_TYPES,
    Accelerator,
    InstanceType,
    by_size,
    instance_type,
)
from eks_inference.catalog.models import (
    DTYPE_BYTES,
    MODELS,
    NEURON_POOR_COMPILE_FAMILIES,
    CatalogModel,
    Dtype,
    ModelArchitecture,
)

__all__ = [
    "DTYPE_BYTES",
    "GB",
    "GIB",
    "INSTANCE_TYPES",
    "MODELS",
    "NEURON_POOR_COMPILE_FAMILIES",
    "Accelerator",
    "CatalogModel",
    "Dtype",
    "InstanceType",
    "ModelArchitecture",
    "by_size",
    "instance_type",
]
