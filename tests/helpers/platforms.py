"""The platforms the tests start from: the reference platform (``deployments.yaml``) and the
example platforms, as files and as plain data to change, and the data files the tests read.

Each reader returns a fresh copy, so a test changes its own and never another's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
REFERENCE_PLATFORM = REPO / "deployments.yaml"
EXAMPLES_DIR = REPO / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
# Upstream CRDs at the pinned versions and upstream tables, each with a header naming its source.
CRDS = REPO / "tests" / "crds"
UPSTREAM = REPO / "tests" / "upstream"


def platform_data(path: Path) -> dict[str, Any]:
    """The platform file at ``path`` as plain data (what ``PlatformSpec.model_validate`` takes)."""
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def reference() -> dict[str, Any]:
    """The reference platform as plain data."""
    return platform_data(REFERENCE_PLATFORM)


def example(stem: str) -> dict[str, Any]:
    """The example platform ``examples/<stem>.yaml`` as plain data."""
    return platform_data(EXAMPLES_DIR / f"{stem}.yaml")


def reference_deployment(position: int, **changes: Any) -> dict[str, Any]:
    """The reference platform's deployment at ``position`` as plain data, with ``changes``
    (0: Llama 3 8B on inf2.48xlarge, 1: Mistral 7B on g6e.2xlarge, standalone vLLM)."""
    deployment: dict[str, Any] = reference()["deployments"][position]
    deployment.update(changes)
    return deployment


def named(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The item of ``items`` (deployments, node pools) whose ``name`` is ``name``."""
    found: dict[str, Any] = next(item for item in items if item["name"] == name)
    return found
