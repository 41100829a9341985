"""Turn command-line values into catalog objects and specs, or a one-line :class:`BadInput`."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from eks_inference.catalog import INSTANCE_TYPES, MODELS, Accelerator, CatalogModel, InstanceType
from eks_inference.cli.errors import BadInput, summarize_validation_error
from eks_inference.platform import PlatformSpec
from eks_inference.spec_file import SpecFileError


def load_platform(path: Path) -> PlatformSpec:
    """Read and validate a platform file; every failure is one line naming the file.

    The file is read within the bounds of :mod:`eks_inference.spec_file` (size, nesting,
    alias expansion, integers, duplicate keys), so no input ends in a traceback or a hang.
    """
    try:
        return PlatformSpec.from_yaml(path)
    except FileNotFoundError:
        raise BadInput(f"platform file {path} not found") from None
    except IsADirectoryError:
        raise BadInput(f"platform file {path} is a directory") from None
    except OSError as error:
        raise BadInput(f"cannot read platform file {path}: {error.strerror or error}") from None
    except SpecFileError as error:
        raise BadInput(f"invalid platform file {error}") from None
    except ValidationError as error:
        raise BadInput(
            f"invalid platform file {path}: {summarize_validation_error(error)}"
        ) from None


def resolve_model(name: str) -> tuple[str, CatalogModel]:
    """A catalog model by name (``llama-3-8b``) or Hugging Face id, case-insensitively."""
    wanted = name.strip().lower()
    for key, entry in MODELS.items():
        if wanted in (key, entry.hf_id.lower()):
            return key, entry
    raise BadInput(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")


def resolve_accelerator_instance(name: str) -> InstanceType:
    """A catalog instance type that has accelerators (models are served only there)."""
    accelerated = sorted(n for n, t in INSTANCE_TYPES.items() if t.accelerator != Accelerator.NONE)
    instance = INSTANCE_TYPES.get(name.strip())
    if instance is None:
        raise BadInput(f"unknown instance type {name!r}; known: {', '.join(accelerated)}")
    if instance.accelerator is Accelerator.NONE:
        raise BadInput(f"{name} has no accelerators; use one of {', '.join(accelerated)}")
    return instance


def require_positive(option: str, value: float | None) -> None:
    """Reject zero and negative numbers (and NaN) with the option's name."""
    if value is not None and not value > 0:
        raise BadInput(f"{option} must be positive, got {value:g}")
