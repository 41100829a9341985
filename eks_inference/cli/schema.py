"""``schema``: print the JSON Schema of a deployment spec or of a platform file."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer


class SchemaKind(StrEnum):
    DEPLOYMENT = "deployment"
    PLATFORM = "platform"


def schema(
    kind: Annotated[
        SchemaKind, typer.Argument(help="deployment (one model) or platform (the whole file).")
    ] = SchemaKind.DEPLOYMENT,
) -> None:
    """Print the JSON Schema of a deployment spec or of a platform file, for editors and CI."""
    from eks_inference.specification.deployment import ModelDeploymentSpec
    from eks_inference.specification.platform import PlatformSpec

    model = ModelDeploymentSpec if kind is SchemaKind.DEPLOYMENT else PlatformSpec
    typer.echo(json.dumps(model.model_json_schema(), indent=2))
