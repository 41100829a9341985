"""A rule never fails on a spec the user got wrong: it reads only values that passed.

Three shapes once ended ``plan`` and ``manifests`` in a traceback: an ``fsx`` block whose
field failed, on a deployment whose engine's cold-start rule reads the loader's options
without naming them (``AttributeError`` from the partial model); and a degree beyond the
instance's devices, refused by the fit rule, then sized by the KServe cold-start rule or the
KV-tier rule (``ZeroDivisionError``). Each is now one line; and the rule runner, not each rule,
makes it so: a rule that raises on a spec with a failed field, or after an earlier rule
refused a value it reads, adds nothing; on a spec that passed so far, it is a bug, and raised.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ModelWrapValidatorHandler, ValidationError, model_validator

from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.validation import Problems, Rule, validate_with_rules
from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REFERENCE_PLATFORM

REFERENCE = yaml.safe_load(REFERENCE_PLATFORM.read_text())


def _reference_with(**deployment: Any) -> dict[str, Any]:
    """The reference platform with its second deployment (vLLM on g6e.2xlarge) changed."""
    data = copy.deepcopy(REFERENCE)
    data["deployments"][1].update(deployment)
    return data


_FSX_WITH_A_BAD_FIELD = _reference_with(
    engine="kserve",
    weights={
        "prefix": "models/mistral-7b/",
        "loader": "fsx",
        "fsx": {"storage_capacity_gib": 1300},
    },
)
_DEGREE_BEYOND_THE_GPUS = _reference_with(
    engine="kserve",
    tensor_parallel_size=3,
    limits={"max_model_len": 8192, "max_num_seqs": 16, "gpu_memory_utilization": "x"},
)
_DEGREE_BEYOND_THE_GPUS_RETYPED_SCALING = _reference_with(
    engine="kserve", tensor_parallel_size=3, scaling={"tensor_parallel_size": 8}
)
_KV_TIER_BEYOND_THE_GPUS = copy.deepcopy(REFERENCE)
_KV_TIER_BEYOND_THE_GPUS["deployments"][1].update(
    tensor_parallel_size=3, kv_cache={"offload": "cpu", "cpu_gib": 32}
)
CASES = {
    "kv-tier-degree-beyond-gpus": (
        _KV_TIER_BEYOND_THE_GPUS,
        "deployments.1.tensor_parallel_size",
    ),
    "fsx-field-fails": (_FSX_WITH_A_BAD_FIELD, "deployments.1.weights.fsx.storage_capacity_gib"),
    "degree-beyond-gpus": (_DEGREE_BEYOND_THE_GPUS, "deployments.1.limits.gpu_memory_utilization"),
    "degree-beyond-gpus-scaling-retyped": (
        _DEGREE_BEYOND_THE_GPUS_RETYPED_SCALING,
        "deployments.1.scaling.tensor_parallel_size",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_spec_is_refused_with_its_field_errors(case: str) -> None:
    data, field = CASES[case]
    with pytest.raises(ValidationError) as caught:
        PlatformSpec.model_validate(data)
    assert field in {".".join(map(str, e["loc"])) for e in caught.value.errors()}


@pytest.mark.parametrize("command", ["plan", "manifests"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_plan_and_manifests_print_one_line(case: str, command: str, tmp_path: Path) -> None:
    data, field = CASES[case]
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    extra = ["--out", str(tmp_path / "out")] if command == "manifests" else []
    one_line_error(run_cli(command, "--platform", path, *extra, cwd=tmp_path), 2, field)


class _Inner(BaseModel):
    size: int
    label: str = "x"


def _reads_more_than_it_says(model: _Outer, problems: Problems) -> None:
    # Declares it reads inner.label, but reads inner.size too.
    if model.inner.size > 10 and model.inner.label == "x":
        problems.add(("inner", "size"), "too large")


def _refuses_count(model: _Outer, problems: Problems) -> None:
    if model.count == 0:
        problems.add(("count",), "count must not be 0", model.count)


def _divides_by_count(model: _Outer, problems: Problems) -> None:
    if 100 / model.count > 50:
        problems.add(("total",), "too much per count")


class _Outer(BaseModel):
    inner: _Inner
    count: int = 1
    total: int = 0

    @model_validator(mode="wrap")
    @classmethod
    def _rules(cls, data: Any, handler: ModelWrapValidatorHandler[_Outer]) -> _Outer:
        return validate_with_rules(
            cls,
            data,
            handler,
            (
                Rule(frozenset({"inner.label"}), _reads_more_than_it_says),
                Rule(frozenset({"count"}), _refuses_count),
                Rule(frozenset({"count", "total"}), _divides_by_count),
            ),
        )


def test_a_rule_failing_on_a_field_that_failed_adds_nothing() -> None:
    with pytest.raises(ValidationError) as caught:
        _Outer.model_validate({"inner": {"size": "many"}, "total": "x"})
    assert [e["loc"] for e in caught.value.errors()] == [("inner", "size"), ("total",)]


def test_a_rule_failing_on_a_value_an_earlier_rule_refused_adds_nothing() -> None:
    with pytest.raises(ValidationError) as caught:
        _Outer.model_validate({"inner": {"size": 1}, "count": 0})
    assert [e["msg"] for e in caught.value.errors()] == ["count must not be 0"]


def test_a_rule_that_is_wrong_in_another_way_still_raises() -> None:
    def misspelt(model: _Outer, problems: Problems) -> None:
        model.inner.sise  # type: ignore[attr-defined]  # noqa: B018

    class Model(_Outer):
        @model_validator(mode="wrap")
        @classmethod
        def _rules(cls, data: Any, handler: ModelWrapValidatorHandler[_Outer]) -> _Outer:
            return validate_with_rules(cls, data, handler, (Rule(frozenset({"inner"}), misspelt),))

    with pytest.raises(AttributeError, match="sise"):
        Model.model_validate({"inner": {"size": 1}})
