"""Compiled-artifact keys: readable, deterministic, and different whenever the graph changes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eks_inference.specification.artifacts import artifact_prefix, override_neuron_config
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.versions import NEURON_SDK_VERSION

BASE: dict[str, Any] = {
    "name": "llama",
    "model": "llama-3-8b",
    "instance_type": "inf2.48xlarge",
    "engine": "rayservice",
    "tensor_parallel_size": 8,
    "limits": {"max_model_len": 4096, "max_num_seqs": 32},
    "weights": {"prefix": "models/llama-3-8b/"},
    "neuron": {"compiled_artifacts_prefix": "neuron-artifacts/", "sequence_buckets": [128, 4096]},
}


def _spec(**changes: Any) -> ModelDeploymentSpec:
    data = {**BASE, **changes}
    return ModelDeploymentSpec.model_validate(data)


def test_layout_is_readable() -> None:
    key = artifact_prefix(_spec())
    assert key.startswith(
        f"neuron-artifacts/meta-llama--Meta-Llama-3-8B-Instruct/main/neuron-{NEURON_SDK_VERSION}/"
        "tp8-seqs32-len4096-bfloat16-"
    )
    assert key.endswith("/")
    assert len(key.rstrip("/").rsplit("-", 1)[1]) == 8


def test_engine_and_replicas_do_not_change_the_graph() -> None:
    same = [
        _spec(),
        _spec(engine="vllm", scaling={"min_replicas": 2, "max_replicas": 2}),
        _spec(name="other", scaling={"min_replicas": 0, "max_replicas": 5}),
        _spec(neuron={**BASE["neuron"], "sequence_buckets": [4096, 128, 128]}),
    ]
    assert len({artifact_prefix(s) for s in same}) == 1


@pytest.mark.parametrize(
    "changes",
    [
        {"tensor_parallel_size": 4},
        {"limits": {"max_model_len": 8192, "max_num_seqs": 32}},
        {"limits": {"max_model_len": 4096, "max_num_seqs": 16}},
        {"model": {**_spec().model.model_dump(), "revision": "abc123"}},
        {"model": "mistral-7b"},
        {"neuron": {**BASE["neuron"], "sequence_buckets": [128, 1024, 4096]}},
        {"neuron": {**BASE["neuron"], "overrides": {"fused_qkv": True}}},
    ],
)
def test_every_graph_input_changes_the_key(changes: dict[str, Any]) -> None:
    assert artifact_prefix(_spec(**changes)) != artifact_prefix(_spec())


def test_override_payload() -> None:
    assert override_neuron_config(_spec()) == {
        "enable_bucketing": True,
        "context_encoding_buckets": [128, 4096],
        "token_generation_buckets": [128, 4096],
    }
    no_buckets = _spec(
        neuron={"compiled_artifacts_prefix": "a/", "overrides": {"async_mode": True}}
    )
    assert override_neuron_config(no_buckets) == {"async_mode": True}


def test_no_prefix_no_key() -> None:
    gpu = ModelDeploymentSpec.model_validate(
        {
            "name": "g",
            "model": "llama-3-8b",
            "instance_type": "g6e.2xlarge",
            "weights": {"prefix": "m/"},
        }
    )
    dev = _spec(neuron={"allow_compile_at_startup": True})
    for spec in (gpu, dev):
        with pytest.raises(ValueError, match="compiled_artifacts_prefix"):
            artifact_prefix(spec)


@given(
    revision=st.text(min_size=1, max_size=40),
    overrides=st.dictionaries(
        st.sampled_from(["fused_qkv", "async_mode", "flash_decoding_enabled", "skip_warmup"]),
        st.booleans(),
        max_size=4,
    ),
)
def test_keys_are_safe_and_stable(revision: str, overrides: dict[str, Any]) -> None:
    spec = _spec(
        model={**_spec().model.model_dump(), "revision": revision},
        neuron={**BASE["neuron"], "overrides": overrides},
    )
    key = artifact_prefix(spec)
    assert key == artifact_prefix(spec)
    assert key.startswith("neuron-artifacts/")
    assert "//" not in key
    assert all(c.isascii() and (c.isalnum() or c in "._-/") for c in key)
