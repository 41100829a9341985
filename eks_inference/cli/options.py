"""Options that several commands share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DEFAULT_PLATFORM = Path("deployments.yaml")
PlatformOption = Annotated[
    Path, typer.Option("--platform", help="Platform file (node pools, bucket, deployments).")
]
