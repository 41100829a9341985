"""The artifact key changes exactly when the compiled graph would: a property over every input.

Graph inputs are the model id and revision, the Neuron SDK, tensor parallelism, the batch
(``max_num_seqs``), the maximum length, the buckets, the dtype and the explicit overrides. The
deployment's name, scaling, engine, weights prefix and ``run_compile_job`` select how a graph
is served, not which graph, so they must leave the key alone: two deployments of one shape
share one compile.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from eks_inference.catalog import MODELS
from eks_inference.specification import artifacts
from eks_inference.specification.artifacts import artifact_prefix, completion_marker_key
from eks_inference.specification.deployment import ModelDeploymentSpec

GRAPH_INPUTS = (
    "model_id",
    "revision",
    "sdk",
    "tensor_parallel_size",
    "max_num_seqs",
    "max_model_len",
    "buckets",
    "dtype",
    "overrides",
)
SERVING_INPUTS = ("name", "scaling", "engine", "weights_prefix", "run_compile_job")
ALL_INPUTS = GRAPH_INPUTS + SERVING_INPUTS

# Llama-3-8B's numbers; on inf2.48xlarge at TP 4 or 8 every combination below fits, float32
# included.
ARCHITECTURE = MODELS["llama-3-8b"].architecture.model_dump()

_PLAIN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_/")
INPUTS: dict[str, st.SearchStrategy[Any]] = {
    # Ordinary ids, near-collisions ("a/b" and "a--b", "refs/pr/1" and "refs-pr-1") and any text.
    "model_id": st.sampled_from(
        ["meta-llama/Meta-Llama-3-8B-Instruct", "org/m", "org--m", "org/m ", "org/m.", "m"]
    )
    | _PLAIN.filter(bool)
    | st.text(min_size=1, max_size=20),
    "revision": st.sampled_from(["main", "refs/pr/1", "refs-pr-1", "refs pr 1", "0" * 40])
    | st.text(min_size=1, max_size=20),
    "sdk": st.sampled_from(["2.31.1", "2.32.0", "2.31.1-rc1", "2.31 1"]),
    "tensor_parallel_size": st.sampled_from([4, 8]),
    "max_num_seqs": st.sampled_from([1, 4, 8, 16]),
    "max_model_len": st.sampled_from([1024, 2048, 4096]),
    "buckets": st.lists(st.sampled_from([128, 256, 512, 1024]), max_size=4),
    "dtype": st.sampled_from(["bfloat16", "float16", "float32"]),
    "overrides": st.dictionaries(
        st.sampled_from(["fused_qkv", "sequence_parallel_enabled", "async_mode"]),
        st.booleans() | st.integers(0, 3),
        max_size=3,
    ),
    "name": st.sampled_from(["llama", "llama-b", "other"]),
    "scaling": st.sampled_from([1, 2, 3]),
    "engine": st.sampled_from(["vllm", "rayservice"]),
    "weights_prefix": st.sampled_from(["models/llama-3-8b/", "models/other/"]),
    "run_compile_job": st.booleans(),
}
inputs = st.fixed_dictionaries(INPUTS)


def _spec(values: dict[str, Any]) -> ModelDeploymentSpec:
    replicas = values["scaling"]
    scaling = (
        {"min_replicas": replicas, "max_replicas": replicas}
        if values["engine"] == "vllm"
        else {"min_replicas": 1, "max_replicas": replicas}
    )
    return ModelDeploymentSpec.model_validate(
        {
            "name": values["name"],
            "model": {
                "id": values["model_id"],
                "revision": values["revision"],
                "architecture": {**ARCHITECTURE, "dtype": values["dtype"]},
            },
            "instance_type": "inf2.48xlarge",
            "engine": values["engine"],
            "tensor_parallel_size": values["tensor_parallel_size"],
            "limits": {
                "max_model_len": values["max_model_len"],
                "max_num_seqs": values["max_num_seqs"],
            },
            "scaling": scaling,
            "weights": {"prefix": values["weights_prefix"]},
            "neuron": {
                "compiled_artifacts_prefix": "neuron-artifacts/",
                "sequence_buckets": values["buckets"],
                "overrides": values["overrides"],
                "run_compile_job": values["run_compile_job"],
            },
        }
    )


def _key(values: dict[str, Any]) -> str:
    """The artifact key of ``values``, with the Neuron SDK version they name."""
    try:
        spec = _spec(values)
    except ValidationError:
        assume(False)
        raise
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(artifacts, "NEURON_SDK_VERSION", values["sdk"])
        return artifact_prefix(spec)


def _graph(values: dict[str, Any]) -> tuple[Any, ...]:
    """What decides the compiled graph, canonically: bucket order and repeats do not matter,
    and ``True`` is not ``1`` in an override (the plugin receives JSON)."""
    return (
        values["model_id"],
        values["revision"],
        values["sdk"],
        values["tensor_parallel_size"],
        values["max_num_seqs"],
        values["max_model_len"],
        frozenset(values["buckets"]),
        values["dtype"],
        json.dumps(values["overrides"], sort_keys=True),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(first=inputs, other=inputs, changed=st.sets(st.sampled_from(ALL_INPUTS), max_size=3))
def test_the_key_changes_exactly_when_the_graph_does(
    first: dict[str, Any], other: dict[str, Any], changed: set[str]
) -> None:
    """Two deployments that differ in up to three inputs (possibly in no value at all).

    Few inputs change at a time, so that pairs with the same graph but other serving choices
    are as common as pairs with different graphs.
    """
    second = {**first, **{name: other[name] for name in changed}}
    same_graph = _graph(first) == _graph(second)
    event(f"same graph: {same_graph}")
    assert (_key(first) == _key(second)) is same_graph, (first, second)


@settings(max_examples=100, deadline=None)
@given(first=inputs, other=inputs, changed=st.sets(st.sampled_from(SERVING_INPUTS), min_size=1))
def test_serving_choices_never_change_the_key(
    first: dict[str, Any], other: dict[str, Any], changed: set[str]
) -> None:
    second = {**first, **{name: other[name] for name in changed}}
    assert _key(first) == _key(second)


BASE: dict[str, Any] = {
    "model_id": "meta-llama/Meta-Llama-3-8B-Instruct",
    "revision": "main",
    "sdk": "2.31.1",
    "tensor_parallel_size": 8,
    "max_num_seqs": 16,
    "max_model_len": 4096,
    "buckets": [128, 1024],
    "dtype": "bfloat16",
    "overrides": {},
    "name": "llama",
    "scaling": 1,
    "engine": "rayservice",
    "weights_prefix": "models/llama-3-8b/",
    "run_compile_job": False,
}
# One different value per graph input: each alone must give a new key.
GRAPH_CHANGES: dict[str, Any] = {
    "model_id": "meta-llama/Meta-Llama-3-8B",
    "revision": "5f0b02c75b57c5855da9ae460ce51323ea669d8a",
    "sdk": "2.32.0",
    "tensor_parallel_size": 4,
    "max_num_seqs": 8,
    "max_model_len": 2048,
    "buckets": [128, 512, 1024],
    "dtype": "float16",
    "overrides": {"fused_qkv": True},
}
SERVING_CHANGES: dict[str, Any] = {
    "name": "other",
    "scaling": 3,
    "engine": "vllm",
    "weights_prefix": "models/other/",
    "run_compile_job": True,
}


def test_every_input_is_classified() -> None:
    assert set(GRAPH_CHANGES) == set(GRAPH_INPUTS)
    assert set(SERVING_CHANGES) == set(SERVING_INPUTS)
    assert set(INPUTS) == set(ALL_INPUTS)


@pytest.mark.parametrize(("name", "value"), sorted(GRAPH_CHANGES.items()))
def test_each_graph_input_alone_changes_the_key(name: str, value: Any) -> None:
    assert _key({**BASE, name: value}) != _key(BASE)


@pytest.mark.parametrize(("name", "value"), sorted(SERVING_CHANGES.items()))
def test_each_serving_input_alone_keeps_the_key(name: str, value: Any) -> None:
    assert _key({**BASE, name: value}) == _key(BASE)


def test_the_sdk_version_is_read_when_the_key_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(BASE)
    before = artifact_prefix(spec)
    monkeypatch.setattr(artifacts, "NEURON_SDK_VERSION", "2.99.0")
    assert "/neuron-2.99.0/" in artifact_prefix(spec)
    assert artifact_prefix(spec) != before
    assert completion_marker_key(spec) == artifact_prefix(spec) + "_COMPLETE"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"revision": "refs/pr/1"}, {"revision": "refs-pr-1"}),
        ({"model_id": "org/m"}, {"model_id": "org--m"}),
        ({"model_id": "org/m"}, {"model_id": "org/m "}),
        ({"revision": "-main"}, {"revision": "main"}),
    ],
)
def test_values_that_differ_only_in_unsafe_characters_get_different_keys(
    first: dict[str, str], second: dict[str, str]
) -> None:
    assert _key({**BASE, **first}) != _key({**BASE, **second})


def test_usual_values_stay_readable() -> None:
    key = _key({**BASE, "revision": "5f0b02c75b57c5855da9ae460ce51323ea669d8a"})
    assert key.startswith(
        "neuron-artifacts/meta-llama--Meta-Llama-3-8B-Instruct/"
        "5f0b02c75b57c5855da9ae460ce51323ea669d8a/neuron-2.31.1/tp8-seqs16-len4096-bfloat16-"
    )
