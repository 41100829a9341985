"""``manifests``: write the platform's Kubernetes manifests with the chart renderer."""

from __future__ import annotations

from pathlib import Path

from eks_inference.platform import PlatformSpec


def write(platform: PlatformSpec, out_dir: Path) -> list[Path]:
    """Render every deployment into ``out_dir`` (replaced whole); the files written.

    The renderer (cdk8s) is imported here, not at start-up: it loads a JavaScript runtime,
    which the other commands do not need.
    """
    from eks_inference.charts.render import write_manifests

    return write_manifests(platform, out_dir)
