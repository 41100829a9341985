"""Preflight of a deployment's LoRA adapters: each adapter's ``adapter_config.json``, read from
the bucket, against the deployment that serves it.

An adapter whose folder or config is missing fails like missing weights (upload it). An
adapter whose config does not fit the deployment is bad input, refused with one line each:

- ``base_model_name_or_path`` is not the deployment's model: for a preloaded adapter its
  Hugging Face id (an adapter trained on another base model gives garbage); for an on-demand
  adapter what vLLM's filesystem resolver compares it with, the server's model path
  (:class:`~eks_inference.specification.capabilities.ServesAdapters`'
  ``on_demand_base_model``), or vLLM never finds it;
- ``r`` exceeds ``adapters.max_lora_rank``: vLLM refuses to load it into the slots;
- a ``target_modules`` entry is not a module the engine applies adapters to for the model
  (:class:`~eks_inference.specification.capabilities.ServesAdapters`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eks_inference.ops.aws.errors import describe_error, is_aws_error, is_not_found
from eks_inference.ops.text import quote_external
from eks_inference.specification.adapters import ADAPTER_CONFIG_NAME, VLLM_LORA_RANKS
from eks_inference.specification.capabilities import ServesAdapters
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engines import engine_of

# A PEFT adapter_config.json is a few hundred bytes; anything larger is not one.
MAX_ADAPTER_CONFIG_BYTES = 1024 * 1024
#: PEFT's shorthand for every linear layer but the output head, which vLLM serves.
ALL_LINEAR = "all-linear"


@dataclass(frozen=True)
class AdapterFindings:
    """What reading a deployment's adapters found: adapters not there to read (``missing``,
    each with why), and adapters whose config does not fit the deployment (``refused``, one
    line each naming the adapter, the key and the fix)."""

    checked: tuple[str, ...]
    missing: tuple[str, ...]
    refused: tuple[str, ...]


def _read_config(s3: Any, bucket: str, key: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        answer = s3.get_object(Bucket=bucket, Key=key)
        body = answer["Body"].read(MAX_ADAPTER_CONFIG_BYTES + 1)
    except Exception as error:
        if not is_aws_error(error):
            raise
        if is_not_found(error):
            return None, f"s3://{bucket}/{key} missing"
        return None, f"cannot read s3://{bucket}/{key}: {describe_error(error, 'S3')}"
    if len(body) > MAX_ADAPTER_CONFIG_BYTES:
        return None, f"s3://{bucket}/{key} is larger than an adapter config"
    try:
        config = json.loads(body)
    except ValueError:
        return None, f"s3://{bucket}/{key} is not JSON"
    if not isinstance(config, dict):
        return None, f"s3://{bucket}/{key} is not a JSON object"
    return config, None


def config_problems(
    spec: ModelDeploymentSpec, name: str, config: dict[str, Any], key: str
) -> list[str]:
    """Why adapter ``name``'s ``config`` (read from ``key``) cannot be served by ``spec``,
    each one line naming the key and the fix."""
    adapters = spec.adapters
    assert adapters is not None
    capability = engine_of(spec).capability(ServesAdapters)
    problems = []
    where = f"adapter {name!r} ({key})"
    base = config.get("base_model_name_or_path")
    shown = repr(quote_external(base)) if isinstance(base, str) else repr(base)
    resolved = capability.on_demand_base_model(spec) if capability is not None else None
    if name in adapters.on_demand and resolved is not None and base != resolved:
        fix = (
            f"it is the deployment's model; set base_model_name_or_path to {resolved!r}, the "
            f"server's model path vLLM's resolver compares it with, or list it under preload"
            if base == spec.model.id
            else f"serve it on a deployment of its base model, or retrain it on {spec.model.id}"
        )
        problems.append(
            f"{where}: base_model_name_or_path is {shown}, not {resolved!r} as an on-demand "
            f"adapter of {spec.model.id!r} needs; {fix}"
        )
    elif name not in adapters.on_demand and base != spec.model.id:
        problems.append(
            f"{where}: base_model_name_or_path is {shown}, not the deployment's model "
            f"{spec.model.id!r}; serve it on a deployment of its base model, or retrain it "
            f"on {spec.model.id}"
        )
    rank = config.get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        problems.append(f"{where}: r is {rank!r}, not a positive rank; save it with PEFT")
    elif rank > adapters.max_lora_rank:
        above = [r for r in VLLM_LORA_RANKS if r >= rank]
        fix = (
            f"set adapters.max_lora_rank to {above[0]} or more"
            if above
            else f"retrain it at a rank of at most {VLLM_LORA_RANKS[-1]}"
        )
        problems.append(
            f"{where}: r {rank} exceeds adapters.max_lora_rank {adapters.max_lora_rank}; {fix}"
        )
    modules = config.get("target_modules")
    known = capability.target_modules(spec) if capability is not None else frozenset()
    if isinstance(modules, str):
        unknown = [] if modules == ALL_LINEAR else [modules]
    elif isinstance(modules, list) and all(isinstance(m, str) for m in modules):
        unknown = sorted(m for m in set(modules) if m not in known)
    else:
        unknown = [repr(modules)]
    if unknown:
        shown = ", ".join(repr(quote_external(m)) for m in unknown)
        problems.append(
            f"{where}: target_modules {shown} are not modules {spec.engine} applies adapters "
            f"to for {spec.model.id}; retrain it targeting {', '.join(sorted(known))}"
        )
    return problems


def check_adapter_configs(s3: Any, bucket: str, spec: ModelDeploymentSpec) -> AdapterFindings:
    """Read every adapter's config of ``spec`` under its folder and check it (nothing for a
    deployment without adapters)."""
    adapters = spec.adapters
    if adapters is None:
        return AdapterFindings((), (), ())
    missing, refused = [], []
    for name in adapters.names:
        key = f"{adapters.folder(name)}{ADAPTER_CONFIG_NAME}"
        config, problem = _read_config(s3, bucket, key)
        if config is None:
            missing.append(
                f"adapter {name!r}: {problem}; upload it with: eks-inference upload DIR "
                f"s3://{bucket}/{adapters.folder(name)} --kind adapter"
            )
            continue
        refused += config_problems(spec, name, config, key)
    return AdapterFindings(adapters.names, tuple(missing), tuple(refused))
