"""KServe's options: how a deployment served as Knative revisions scales and waits.

Engines that run on Knative Serving (``engine: kserve``) scale between ``scaling.min_replicas``
and ``scaling.max_replicas`` on concurrent requests, down to zero. What Knative needs beyond
the bounds is typed here, each with a default and why:

* ``retention_seconds``, default 1800: the last replica stays up for 30 minutes after traffic
  stops before it is removed. A cold start (node launch, image pull, model load) costs 15 to
  40 minutes of waiting; a client that comes back within half an hour finds the model warm,
  and an idle period costs at most half an hour of node time.
* ``initial_replicas``, default ``max(min_replicas, 1)``: a new revision starts one replica
  even when it may scale to zero, so every deployment proves once that its model loads (a
  revision that never started would fail only at the first request); it is then removed once
  idle. ``0`` skips that check and costs nothing until the first request.
* ``progress_deadline_seconds``, default: the deployment's rollout budget (node launch and
  image pull plus the model load budget, :mod:`eks_inference.specification.startup_budget`). Knative
  marks a
  revision failed, and stops trying, when no replica is ready by then.
* ``request_timeout_seconds``, default: the rollout budget plus the longest generation
  (:func:`eks_inference.specification.routes.decode_seconds`, doubled): a request that arrives when
  no replica runs waits in Knative's activator for the whole cold start.

They are the ``options`` of a spec naming ``engine: kserve``. The engine checks the values
against the load budget (a deadline shorter than a cold start fails, naming the field and both
numbers); another engine has options of its own, or none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from eks_inference.specification.engines import engine_options

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec

# An Application Load Balancer holds an idle connection for at most 4000 s, so no request
# through it outlives that; the platform's Knative Serving allows revisions that long
# (`max-revision-timeout-seconds`), and no longer.
MAX_REQUEST_TIMEOUT_S = 4000
# A day: a longer deadline or retention is a typo, not a plan.
_MAX_SECONDS = 86_400
DEFAULT_RETENTION_S = 1800


class Serverless(BaseModel):
    """Knative settings of a deployment whose engine runs as Knative revisions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    retention_seconds: int = Field(
        default=DEFAULT_RETENTION_S,
        ge=0,
        le=_MAX_SECONDS,
        description="How long the last replica stays after traffic stops before scaling to "
        "zero (Knative's scale-to-zero-pod-retention-period).",
    )
    initial_replicas: int | None = Field(
        default=None,
        ge=0,
        le=10_000,
        description="Replicas a new revision starts with; default max(min_replicas, 1), so "
        "each revision proves once that its model loads.",
    )
    progress_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        le=_MAX_SECONDS,
        description="Seconds a new revision has to bring up a replica before Knative marks it "
        "failed; default: node launch, image pull and model load budget.",
    )
    request_timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REQUEST_TIMEOUT_S,
        description="Seconds a request may take, a cold start included; default: the rollout "
        "budget plus the longest generation.",
    )


def serverless_of(spec: ModelDeploymentSpec) -> Serverless:
    """The Knative settings of a spec naming ``engine: kserve``."""
    return engine_options(spec, Serverless)
