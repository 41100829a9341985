"""``plan``: the seed benchmark's cost column, the decode bound, and the platform plan."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import Result

from eks_inference.catalog import INSTANCE_TYPES, MODELS, Accelerator, sizing
from eks_inference.cli.inputs import load_platform
from eks_inference.cli.plan_render import platform_markdown
from eks_inference.ops import plan
from eks_inference.specification.deployment import ModelDeploymentSpec
from tests.helpers.checks import found
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO

Cli = Callable[..., Result]

# Seed 000, section 6: Llama-3-8B measured throughput and the cost per 1M tokens it reports.
SEED_BENCHMARK = [
    ("inf2.48xlarge", 8, 3120, 1.15),
    ("g5.12xlarge", 4, 1240, 1.27),
    ("p4d.24xlarge", 8, 4800, 1.89),
]
JSON_KEYS = {
    "fits",
    "weights_gib",
    "kv_cache_gib",
    "accelerator_memory_gib",
    "replicas_per_node",
    "decode_tokens_per_second_bound",
    "price_per_hour",
    "cost_per_million_tokens",
}


def _json(cli: Cli, *args: str) -> dict[str, object]:
    result = cli("plan", *args, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(("instance", "tp", "measured", "expected"), SEED_BENCHMARK)
def test_cost_per_million_tokens_matches_the_seed_benchmark(
    cli: Cli, instance: str, tp: int, measured: int, expected: float
) -> None:
    data = _json(
        cli,
        "--model",
        "Llama-3-8B",
        "--instance-type",
        instance,
        "--tensor-parallel",
        str(tp),
        "--measured-tokens-per-second",
        str(measured),
    )
    assert data.keys() >= JSON_KEYS
    assert data["cost_per_million_tokens"] == pytest.approx(expected, rel=0.01)
    assert data["throughput_source"] == "measured"
    assert data["fits"] is True


def test_decode_bound_on_inf2_is_at_least_the_measured_seed_throughput(cli: Cli) -> None:
    data = _json(
        cli, "--model", "llama-3-8b", "--instance-type", "inf2.48xlarge", "--tensor-parallel", "8"
    )
    assert isinstance(data["decode_tokens_per_second_bound"], float)
    assert data["decode_tokens_per_second_bound"] >= 3120
    # Without a measurement the cost comes from the bound, at the catalog price.
    assert data["throughput_source"] == "bound"
    assert data["price_per_hour"] == INSTANCE_TYPES["inf2.48xlarge"].price_per_hour
    assert data["tokens_per_second"] == data["decode_tokens_per_second_bound"]


def test_configuration_numbers() -> None:
    arch = MODELS["llama-3-8b"].architecture
    result = plan.plan_configuration("llama-3-8b", arch, INSTANCE_TYPES["inf2.48xlarge"], 8)
    assert result.max_model_len == 4096
    assert result.max_num_seqs == 32
    assert result.replicas_per_node == 3
    # 8 NeuronCores of 16 GiB: the TP group's memory, not the node's.
    assert result.accelerator_memory_gib == 128
    # 2 x 32 layers x 8 KV heads x 128 x 2 bytes x 4096 tokens x 32 sequences = 16 GiB.
    assert result.kv_cache_gib == pytest.approx(16.0)
    assert result.weights_gib == pytest.approx(8_030_261_248 * 2 / 1024**3)
    assert result.fits


def test_a_configuration_that_does_not_fit_fails_after_showing_its_numbers(cli: Cli) -> None:
    result = cli(
        "plan",
        "--model",
        "llama-3.1-70b",
        "--instance-type",
        "g6e.xlarge",
        "--tensor-parallel",
        "1",
        "--price-per-hour",
        "1.5",
        "--max-model-len",
        "8192",
        "--max-num-seqs",
        "8",
        "--json",
    )
    # The JSON still says by how much, for a script that wants to know; the exit code says
    # that it is no plan.
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["fits"] is False
    assert data["price_per_hour"] == 1.5
    assert data["price_source"] == "given"
    assert data["max_model_len"] == 8192
    assert data["max_num_seqs"] == 8
    assert result.stderr == (
        "error: llama-3.1-70b does not fit on g6e.xlarge TP1: 151.4 GiB needed, 40.2 GiB usable "
        "at max_model_len 8192 and max_num_seqs 8; lower --max-model-len or --max-num-seqs, or "
        "see --plot for the configurations that fit\n"
    )


def test_a_configuration_that_does_not_fit_shows_no_cost_and_the_degree_that_fits(
    cli: Cli,
) -> None:
    result = cli(
        "plan",
        "--model",
        "llama-3.1-70b",
        "--instance-type",
        "g6e.48xlarge",
        "--tensor-parallel",
        "2",
    )
    one_line_error(result, 1, "use --tensor-parallel 8,")
    assert "$ per 1M tokens" in result.stdout
    assert "none: does not fit" in result.stdout


def test_configuration_table_is_readable_without_a_terminal(cli: Cli) -> None:
    result = cli(
        "plan",
        "--model",
        "llama-3-8b",
        "--instance-type",
        "inf2.48xlarge",
        "--tensor-parallel",
        "8",
    )
    assert result.exit_code == 0, result.stderr
    assert "\x1b[" not in result.stdout
    assert "replicas per node" in result.stdout
    assert "10,171 tok/s" in result.stdout


def test_platform_plan_of_the_reference_app() -> None:
    result = plan.plan_platform(load_platform(REFERENCE_PLATFORM))
    by_name = {d.name: d for d in result.deployments}
    assert set(by_name) == {"llama3-8b-inf2", "mistral-7b-g6e", "qwen25-7b-g6e"}
    llama = by_name["llama3-8b-inf2"]
    # Six replicas at most, three per inf2.48xlarge: one to two nodes.
    assert (llama.nodes_min, llama.nodes_max) == (1, 2)
    assert llama.configuration.replicas_per_node == 3
    assert llama.price_per_hour_max == pytest.approx(2 * 12.98127)
    assert all(d.configuration.fits for d in result.deployments)
    pools = {p.name: p for p in result.pools}
    assert pools["system"].price_per_hour_min == pytest.approx(2 * 0.384)
    assert result.price_per_hour_max == pytest.approx(
        sum(p.price_per_hour_max for p in pools.values())
    )


def test_plan_table_for_the_reference_platform(cli: Cli) -> None:
    result = cli("plan", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 0, result.stderr
    for text in ("llama3-8b-inf2", "mistral-7b-g6e", "qwen25-7b-g6e", "inf2.48xlarge", "$25.96"):
        assert text in result.stdout
    # One line per row: nothing is wrapped without a terminal.
    assert any("llama3-8b-inf2" in line and "$0.35" in line for line in result.stdout.splitlines())


def test_platform_json(cli: Cli) -> None:
    data = _json(cli, "--platform", str(REFERENCE_PLATFORM))
    assert [d["name"] for d in data["deployments"]] == [  # type: ignore[attr-defined]
        "llama3-8b-inf2",
        "mistral-7b-g6e",
        "qwen25-7b-g6e",
    ]


def test_markdown_is_written_and_deterministic(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "k8s_manifests" / "PLAN.md"
    result = cli("plan", "--platform", REFERENCE_PLATFORM, "--markdown", "--output", out)
    assert result.exit_code == 0, result.stderr
    text = out.read_text()
    assert text.startswith("# Capacity and cost plan")
    assert "| llama3-8b-inf2 | inf2.48xlarge | 8 | 3 | 1-2 |" in text
    assert "| **cluster** |" in text
    again = platform_markdown(
        plan.plan_platform(load_platform(REFERENCE_PLATFORM)), "deployments.yaml"
    )
    assert text == again


def test_committed_plan_is_fresh() -> None:
    """k8s_manifests/PLAN.md is what `make synth` writes from deployments.yaml now."""
    committed = REPO / "k8s_manifests" / "PLAN.md"
    assert committed.exists(), "k8s_manifests/PLAN.md is missing; run `make synth`"
    expected = platform_markdown(
        plan.plan_platform(load_platform(REFERENCE_PLATFORM)), REFERENCE_PLATFORM.name
    )
    assert committed.read_text() == expected, "k8s_manifests/PLAN.md is stale; run `make synth`"


def test_tensor_parallel_rule_agrees_with_the_spec() -> None:
    """plan's TP rule is the spec's: every usable degree validates unless memory is short."""
    for model_name, entry in MODELS.items():
        accelerated = [i for i in INSTANCE_TYPES.values() if i.accelerator is not Accelerator.NONE]
        for instance in found(accelerated):
            for tp in (1, 2, 3, 4, 8, 12, 16, 24):
                neuron = (
                    {"allow_compile_at_startup": True, "allow_poor_compile_architecture": True}
                    if instance.accelerator is Accelerator.NEURON
                    else None
                )
                raw = {
                    "name": "x",
                    "model": model_name,
                    "instance_type": instance.name,
                    "tensor_parallel_size": tp,
                    # A tiny KV cache, so that memory fails only where the weights do not fit.
                    "limits": {"max_model_len": 128, "max_num_seqs": 1},
                    "weights": {"prefix": "w/"},
                    "neuron": neuron,
                }
                problem = sizing.tensor_parallel_problem(entry.architecture, instance, tp)
                try:
                    ModelDeploymentSpec.model_validate(raw)
                except ValidationError as error:
                    messages = [e["msg"] for e in error.errors()]
                    memory_only = all("exceed the" in m for m in messages)
                    assert (problem is None) == memory_only, (model_name, instance.name, tp)
                else:
                    assert problem is None, (model_name, instance.name, tp)
