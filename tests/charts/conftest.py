"""The chart tests' fixtures: the reference and variants platforms, rendered once per session
(:mod:`tests.helpers.rendered`)."""

from tests.helpers.rendered import (
    reference,
    reference_platform,
    rendered,
    variants,
    variants_platform,
)

__all__ = ["reference", "reference_platform", "rendered", "variants", "variants_platform"]
