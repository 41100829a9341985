"""How a deployment's pods read its weights from the model bucket: the loader it names.

The loader is one typed option every engine reads the same way. Which loaders an engine
supports on which accelerator is the engine's to say
(:meth:`~eks_inference.spec.engines.Engine.loaders`); what a loader contributes to a pod
(volumes, the model path and arguments, the identity that reads the prefix) is built in one
place, :mod:`eks_inference.charts.loading`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from eks_inference.aws_types import KeyPrefix

Loader = Literal["mountpoint", "runai_streamer"]


class Weights(BaseModel):
    """Where the weights are in the model bucket and how pods read them.

    ``mountpoint`` mounts the prefix read-only through the Mountpoint for S3 CSI driver (any
    engine); ``runai_streamer`` lets standalone vLLM on GPUs stream ``s3://`` directly, with
    no volume at all, which starts fastest.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix: KeyPrefix = Field(description="Key prefix in the model bucket, ending '/'.")
    loader: Loader = "mountpoint"
