"""How a deployment's requests are spread over its replicas (``routing``).

Absent, or with ``picker: round_robin``, the load balancer spreads requests over the servers
itself, as it always has (least outstanding requests per target). Any other picker puts the
Gateway API Inference Extension's endpoint picker (llm-d-router's EPP) in the path: a proxy
asks the picker, for every request, which replica should serve it, and the picker scores the
replicas with the scorers the picker names:

- ``prefix_cache``: the prefix-cache scorer (the replica that most likely holds the prompt's
  prefix in its KV cache, from the prompts the picker has sent it), the KV-cache-utilization
  scorer and the queue scorer, weighted 3, 2 and 2 by default (the pinned release's default
  scheduling profile);
- ``kv_cache_load``: the KV-cache-utilization and queue scorers only, weighted 2 and 2 (load
  from the servers' own metrics, no prefix affinity).

``weights`` overrides a scorer's weight (0 to :data:`MAX_SCORER_WEIGHT`; 0 leaves the scorer
out). ``failure_mode`` says what the proxy does when the picker does not answer: ``fail_open``
(the default, the InferencePool's own default) sends the request round robin to the servers,
``fail_closed`` refuses it. Only an engine with the
:class:`~eks_inference.specification.capabilities.PicksEndpoints` capability accepts a picker.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from eks_inference.specification.validation import Problems

Picker = Literal["round_robin", "prefix_cache", "kv_cache_load"]
FailureMode = Literal["fail_open", "fail_closed"]

# The EPP takes any float weight (SchedulingPlugin.Weight, apix/config/v1alpha1 at v0.10.0);
# a bound keeps a typo (300 for 3) from drowning the other scorers unnoticed.
MAX_SCORER_WEIGHT = 100.0

#: The scorers of each picker and their default weights. ``prefix_cache`` is the pinned
#: release's default profile (config/charts/routerlib/templates/_config.yaml at v0.10.0).
DEFAULT_WEIGHTS: dict[str, dict[str, float]] = {
    "prefix_cache": {"prefix_cache": 3.0, "kv_cache_utilization": 2.0, "queue": 2.0},
    "kv_cache_load": {"kv_cache_utilization": 2.0, "queue": 2.0},
}


class ScorerWeights(BaseModel):
    """Weights of the picker's scorers; a weight left out keeps the picker's default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix_cache: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SCORER_WEIGHT,
        description="Prefix-cache scorer (picker: prefix_cache only); default 3.",
    )
    kv_cache_utilization: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SCORER_WEIGHT,
        description="KV-cache-utilization scorer (vllm:kv_cache_usage_perc); default 2.",
    )
    queue: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SCORER_WEIGHT,
        description="Queue scorer (vllm:num_requests_waiting); default 2.",
    )


class Routing(BaseModel):
    """Which replica serves a request: the load balancer's round robin, or the endpoint picker.

    Defaults: ``picker: round_robin`` (no picker), ``failure_mode: fail_open``, each scorer
    at the picker's default weight (:data:`DEFAULT_WEIGHTS`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    picker: Picker = Field(
        default="round_robin",
        description="round_robin: the load balancer spreads requests (no picker); "
        "prefix_cache: the endpoint picker prefers the replica holding the prompt's prefix; "
        "kv_cache_load: the endpoint picker prefers the least loaded KV cache and queue.",
    )
    weights: ScorerWeights = Field(
        default_factory=ScorerWeights,
        description="Scorer weights (0 to 100; 0 leaves a scorer out); defaults per picker.",
    )
    failure_mode: FailureMode = Field(
        default="fail_open",
        description="When the picker does not answer: fail_open sends the request round "
        "robin to the servers, fail_closed refuses it.",
    )

    @property
    def picks(self) -> bool:
        """Whether an endpoint picker is in the path (any picker but round_robin)."""
        return self.picker != "round_robin"

    def scorer_weights(self) -> dict[str, float]:
        """The weight of each scorer the picker runs (none for round_robin); a scorer
        weighted 0 is left out."""
        weights = dict(DEFAULT_WEIGHTS.get(self.picker, {}))
        for scorer, weight in self.weights.model_dump(exclude_none=True).items():
            weights[scorer] = weight
        return {scorer: weight for scorer, weight in weights.items() if weight > 0}

    @model_validator(mode="after")
    def _weights_of_the_picker(self) -> Routing:
        problems = Problems("Routing")
        given = self.weights.model_dump(exclude_none=True)
        scorers = DEFAULT_WEIGHTS.get(self.picker)
        if scorers is None:
            if given:
                problems.add(
                    ("weights",),
                    "picker: round_robin runs no scorers; remove weights, or use picker: "
                    "prefix_cache or kv_cache_load",
                )
        else:
            for scorer in sorted(set(given) - set(scorers)):
                problems.add(
                    ("weights", scorer),
                    f"picker: {self.picker} has no {scorer} scorer; remove it, or use "
                    "picker: prefix_cache",
                    given[scorer],
                )
            if not problems and not self.scorer_weights():
                problems.add(
                    ("weights",),
                    f"every scorer of picker: {self.picker} is weighted 0; give one a weight "
                    "above 0, or use picker: round_robin",
                )
        problems.raise_if_any()
        return self
