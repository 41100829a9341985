"""What a deployment that scales to zero makes its first request wait, and saves while idle.

A deployment scales to zero when its engine can (the
:class:`~eks_inference.specification.capabilities.ScalesToZero` capability: KServe, Ray Serve) and
``scaling.min_replicas`` is 0. For each, the plan states:

- **the expected cold start**: the deployment's own cold start with its loader, the one
  estimate of :func:`eks_inference.specification.cold_start.cold_start` (the plan's cold-start table
  shows
  its phases). The first request after an idle stretch waits that long before vLLM starts
  on it: a node launch, the image pull, the weights read and the engine start.
- **what an idle hour at zero saves**: the nodes one warm replica would hold
  (``min_replicas: 1`` instead of 0 keeps ``ceil(1 / replicas_per_node)`` nodes, a whole node
  whatever share of it the replica uses, since EC2 bills the node) at the node price the plan
  uses for the deployment's pool: the catalog's on-demand price, or its spot price for a
  spot pool (or ``--spot-price``).
- **what a day saves**: that, times the hours a day the deployment spends at zero. A day is
  taken to hold ``idle_hours`` without requests in one stretch (overnight, say); the
  deployment reaches zero only once its engine has let the last replica go
  (:attr:`~eks_inference.specification.capabilities.ScalesToZero.delay_seconds`:
  Knative's retention period, or Ray Serve's downscale delay and the Ray autoscaler's idle
  timeout), so that much of the stretch saves nothing. The node provisioner removes the
  emptied node some minutes later still (Karpenter's ``consolidateAfter``, the Cluster
  Autoscaler's scale-down delay), which the figure does not subtract: it is an upper bound.
  The cold start that ends the stretch is paid as a warm node would be, so it neither adds
  nor saves.

Idle hours are an input of the plan (``eks-inference plan --idle-hours``, default
:data:`DEFAULT_IDLE_HOURS`) rather than a field of the spec: they describe the traffic, which
the platform file does not know; the saving per idle hour is printed beside them, so another
traffic pattern is a multiplication away. The default, half of each day, is a model used
through a working day and idle through the night.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eks_inference.catalog import sizing
from eks_inference.ops.errors import BadInput
from eks_inference.specification.capabilities import ScalesToZero
from eks_inference.specification.engines import engine_of

if TYPE_CHECKING:
    from eks_inference.specification.cold_start import ColdStart
    from eks_inference.specification.deployment import ModelDeploymentSpec

DEFAULT_IDLE_HOURS = 12.0
HOURS_PER_DAY = 24.0
SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class ScaleToZero:
    """A deployment at ``min_replicas: 0``: its cold start and what idle time saves."""

    cold_start_seconds: float
    loader: str
    delay_seconds: int
    nodes_per_replica: int
    node_price_per_hour: float
    idle_hours_per_day: float

    @property
    def saved_per_idle_hour(self) -> float:
        """USD an hour at zero saves: the nodes one warm replica would hold."""
        return self.nodes_per_replica * self.node_price_per_hour

    @property
    def hours_at_zero_per_day(self) -> float:
        """Hours of the idle stretch after the engine has let the last replica go."""
        return max(self.idle_hours_per_day - self.delay_seconds / SECONDS_PER_HOUR, 0.0)

    @property
    def saved_per_day(self) -> float:
        """USD a day with ``idle_hours_per_day`` idle hours saves against one warm replica."""
        return self.saved_per_idle_hour * self.hours_at_zero_per_day

    def as_json(self) -> dict[str, Any]:
        """The inputs and the three figures, rounded to the cent and the second."""
        return {
            "cold_start_seconds": round(self.cold_start_seconds, 1),
            "loader": self.loader,
            "scale_to_zero_delay_seconds": self.delay_seconds,
            "nodes_per_replica": self.nodes_per_replica,
            "node_price_per_hour": self.node_price_per_hour,
            "idle_hours_per_day": self.idle_hours_per_day,
            "hours_at_zero_per_day": round(self.hours_at_zero_per_day, 2),
            "saved_per_idle_hour": round(self.saved_per_idle_hour, 2),
            "saved_per_day": round(self.saved_per_day, 2),
        }


def _idle_delay(spec: ModelDeploymentSpec) -> ScalesToZero | None:
    """How ``spec``'s engine scales it to zero, when it runs no replica while idle (the
    engine can, and min_replicas is 0)."""
    if spec.scaling.min_replicas > 0:
        return None
    return engine_of(spec).capability(ScalesToZero)


def scales_to_zero(spec: ModelDeploymentSpec) -> bool:
    """Whether ``spec`` runs no replica while idle: its engine can, and min_replicas is 0."""
    return _idle_delay(spec) is not None


def require_idle_hours(value: float) -> float:
    """``value`` as hours a day without requests; ``BadInput`` outside 0 to 24."""
    if not math.isfinite(value) or not 0 <= value <= HOURS_PER_DAY:
        raise BadInput(
            f"--idle-hours {value:g}: give the hours a day without requests, from 0 to "
            f"{HOURS_PER_DAY:g}"
        )
    return value


def scale_to_zero(
    spec: ModelDeploymentSpec,
    cold_start: ColdStart,
    node_price_per_hour: float,
    idle_hours: float = DEFAULT_IDLE_HOURS,
) -> ScaleToZero | None:
    """The scale-to-zero figures of ``spec`` (``None`` unless it scales to zero), from its
    own ``cold_start`` and its pool's ``node_price_per_hour``."""
    capability = _idle_delay(spec)
    if capability is None:
        return None
    return ScaleToZero(
        cold_start_seconds=cold_start.total_seconds,
        loader=cold_start.loader,
        delay_seconds=capability.delay_seconds(spec),
        nodes_per_replica=sizing.nodes_needed(1, spec.replicas_per_node),
        node_price_per_hour=node_price_per_hour,
        idle_hours_per_day=require_idle_hours(idle_hours),
    )
