"""Dynamo's options: the graph's shape (aggregated, or prefill and decode apart) and its router.

``options`` of a spec naming ``engine: dynamo`` (:class:`DynamoOptions`), each with its default
and why:

* ``mode``, default: ``disaggregated`` when a split is given (``prefill``/``decode`` here, or the
  deployment's engine-neutral ``disaggregation`` field), else ``aggregated``. Aggregated, every
  vLLM worker prefills and decodes, ``scaling.min_replicas`` of them at the deployment's
  ``tensor_parallel_size``; disaggregated, prefill workers compute the prompt's KV cache and
  hand it to decode workers over NIXL.
* ``prefill`` and ``decode``, default one worker each at TP 1: each group's replicas and
  tensor-parallel degree. A group's ``model``, when given, must be the deployment's: the KV
  cache a prefill worker hands over is only meaningful to a decode worker with the same
  weights, dtype and KV block size, which both groups take from the deployment.
* ``router``, default ``kv``: the frontend sends a request to the worker that already holds
  the longest prefix of its prompt in its KV cache (``--router-mode kv``, fed by the workers'
  KV events), the reason to run Dynamo at all; ``round_robin`` spreads requests evenly.

The split may be written once only: in ``options`` or in ``disaggregation`` (the field every
engine with the :class:`~eks_inference.specification.capabilities.DisaggregatesPrefill`
capability reads); :func:`graph_of` resolves either to one
:class:`~eks_inference.specification.kv_serving.Disaggregation`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from eks_inference.specification.engines import engine_options
from eks_inference.specification.kv_serving import Disaggregation, WorkerGroup

if TYPE_CHECKING:
    from eks_inference.specification.deployment import ModelDeploymentSpec

Mode = Literal["aggregated", "disaggregated"]
Router = Literal["kv", "round_robin"]
# The frontend's --router-mode values (dynamo/common/configuration/groups/router_args.py at
# 1.6.1) for each router.
ROUTER_MODES: dict[str, str] = {"kv": "kv", "round_robin": "round-robin"}


class DynamoWorkerGroup(WorkerGroup):
    """One worker group of a disaggregated graph: replicas, tensor-parallel degree and model."""

    model: str | None = Field(
        default=None,
        description="The catalog model the group serves; default and only value: the "
        "deployment's model (the KV cache moves between the groups).",
    )


class DynamoOptions(BaseModel):
    """How a Dynamo graph is laid out and routed (see the module for each default)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode | None = Field(
        default=None,
        description="aggregated: every worker prefills and decodes; disaggregated: prefill "
        "and decode workers apart. Default: disaggregated when a split is given.",
    )
    prefill: DynamoWorkerGroup | None = Field(
        default=None, description="The prefill workers (mode: disaggregated)."
    )
    decode: DynamoWorkerGroup | None = Field(
        default=None, description="The decode workers (mode: disaggregated)."
    )
    router: Router = Field(
        default="kv",
        description="kv: to the worker holding the longest cached prefix; round_robin: evenly.",
    )


def dynamo_options(spec: ModelDeploymentSpec) -> DynamoOptions:
    """The options of a spec naming ``engine: dynamo``."""
    return engine_options(spec, DynamoOptions)


@dataclass(frozen=True)
class Split:
    """A disaggregated graph as the spec gives it: the groups and the field they are written
    under (``("options",)`` or ``("disaggregation",)``), for the errors' paths."""

    groups: Disaggregation
    field: tuple[str, ...]


def split_of(spec: ModelDeploymentSpec) -> Split | None:
    """The prefill/decode split of ``spec``, or ``None`` when it serves aggregated."""
    options = dynamo_options(spec)
    written = options.prefill is not None or options.decode is not None
    mode = options.mode or (
        "disaggregated" if written or spec.disaggregation is not None else "aggregated"
    )
    if mode == "aggregated":
        return None
    if spec.disaggregation is not None and not written:
        return Split(spec.disaggregation, ("disaggregation",))
    return Split(
        Disaggregation(
            prefill=_group(options.prefill),
            decode=_group(options.decode),
        ),
        ("options",),
    )


def graph_of(spec: ModelDeploymentSpec) -> Disaggregation | None:
    """The worker groups of ``spec``'s graph when disaggregated; ``None`` when aggregated."""
    split = split_of(spec)
    return None if split is None else split.groups


def _group(given: DynamoWorkerGroup | None) -> WorkerGroup:
    if given is None:
        return WorkerGroup()
    return WorkerGroup(replicas=given.replicas, tensor_parallel_size=given.tensor_parallel_size)
