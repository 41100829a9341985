"""Helm values checked against a chart's pinned ``values.yaml`` (kept under ``tests/upstream``).

A key the chart does not know is ignored by Helm without a word, so a misspelt or moved value
would silently leave the chart's default in place.
"""

from __future__ import annotations

from typing import Any

# Values the charts pass into the pod spec whole (a node selector's labels, a Kubernetes
# Affinity), whatever keys the chart's default holds.
FREE_MAPS = frozenset({"nodeSelector", "affinity"})


def missing_keys(given: Any, pinned: Any, path: str = "") -> list[str]:
    """Keys of ``given`` that the pinned values do not have (maps only; a value the chart
    leaves empty, ``{}``, and those of :data:`FREE_MAPS` take any keys)."""
    if not isinstance(given, dict) or not isinstance(pinned, dict) or not pinned:
        return []
    missing = []
    for key, value in given.items():
        if key not in pinned:
            missing.append(f"{path}{key}")
        elif key not in FREE_MAPS:
            missing += missing_keys(value, pinned[key], f"{path}{key}.")
    return missing
