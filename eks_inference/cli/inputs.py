"""Turn command-line values into catalog objects and specs, or a one-line :class:`BadInput`."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from eks_inference.catalog import (
    INSTANCE_TYPES,
    MODELS,
    Accelerator,
    CatalogModel,
    InstanceType,
    by_size,
)
from eks_inference.ops.errors import BadInput, summarize_validation_error
from eks_inference.specification.files import SpecFileError
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.validation import UNRELATED_MAPPING_ERROR_TYPE, required_fields


def load_platform(path: Path) -> PlatformSpec:
    """Read and validate a platform file; every failure is one line naming the file.

    The file is read within the bounds of :mod:`eks_inference.specification.files` (a regular file;
    size, nesting, alias expansion, integers, tags, duplicate keys), so no input ends in a
    traceback or a hang. A file that holds something else than a platform (a list, text, a
    system file, another tool's YAML) is said to be one, rather than listed key by key.
    """
    try:
        return PlatformSpec.from_yaml(path)
    except FileNotFoundError:
        raise BadInput(f"platform file {path} not found") from None
    except OSError as error:
        raise BadInput(f"cannot read platform file {path}: {error.strerror or error}") from None
    except SpecFileError as error:
        raise BadInput(f"invalid platform file {error}") from None
    except ValidationError as error:
        other = _not_a_platform(error)
        if other is not None:
            raise BadInput(f"{path} is not a platform file: {other}") from None
        raise BadInput(
            f"invalid platform file {path}: {summarize_validation_error(error)}"
        ) from None


# What a YAML document holds, for a file that is not a mapping of fields.
_KINDS: dict[type, str] = {str: "text", list: "a list", int: "a number", float: "a number"}


def _not_a_platform(error: ValidationError) -> str | None:
    """Why the data validated is no platform at all, or ``None`` when it is a wrong one."""
    details = error.errors(include_url=False)
    if len(details) != 1 or details[0]["loc"]:
        return None
    detail = details[0]
    if detail["type"] == UNRELATED_MAPPING_ERROR_TYPE:
        return detail["msg"]
    if detail["type"] == "model_type":
        value = detail["input"]
        if value is None:
            return "it is empty"
        held = _KINDS.get(type(value), f"a {type(value).__name__}")
        needed = ", ".join(required_fields(PlatformSpec))
        return f"it holds {held}, not a mapping of platform fields (it needs {needed})"
    return None


def resolve_model(name: str) -> tuple[str, CatalogModel]:
    """A catalog model by name (``llama-3-8b``) or Hugging Face id, case-insensitively."""
    wanted = name.strip().lower()
    for key, entry in MODELS.items():
        if wanted in (key, entry.hf_id.lower()):
            return key, entry
    raise BadInput(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")


def resolve_accelerator_instance(name: str) -> InstanceType:
    """A catalog instance type that has accelerators (models are served only there)."""
    accelerated = sorted(
        (n for n, t in INSTANCE_TYPES.items() if t.accelerator != Accelerator.NONE), key=by_size
    )
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
