"""``plan`` of the KServe example: the expected cold start and what idle saves per day, in the
tables, the Markdown and the JSON, each figure computed here from the catalog; none for a
platform without a deployment at zero (the reference's PLAN.md)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from typer.testing import Result

from eks_inference.catalog import INSTANCE_TYPES
from eks_inference.cli.plan_cells import money
from eks_inference.engines.kserve.options import serverless_of
from eks_inference.specification.cold_start import cold_start
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO

Cli = Callable[..., Result]
EXAMPLE = REPO / "examples" / "kserve-platform.yaml"
PLATFORM = PlatformSpec.from_yaml(EXAMPLE)
(SPEC,) = PLATFORM.deployments
PRICE = INSTANCE_TYPES[SPEC.instance_type].price_per_hour
RETENTION_HOURS = serverless_of(SPEC).retention_seconds / 3600
COLD_START = cold_start(SPEC).total_seconds


def _expected_row(idle_hours: float) -> list[str]:
    at_zero = idle_hours - RETENTION_HOURS
    return [
        SPEC.name,
        SPEC.weights.loader,
        f"{COLD_START:.0f}",
        str(serverless_of(SPEC).retention_seconds),
        money(PRICE),
        f"{idle_hours:g}",
        f"{at_zero:.2f}",
        money(PRICE * at_zero),
    ]


def test_the_markdown_has_the_scale_to_zero_row(cli: Cli) -> None:
    result = cli("plan", "--platform", EXAMPLE, "--markdown")
    assert result.exit_code == 0, result.stderr
    assert "## Scale to zero" in result.stdout
    assert "| " + " | ".join(_expected_row(12)) + " |" in result.stdout.splitlines()


def test_the_tables_show_the_cold_start_and_the_saving(cli: Cli) -> None:
    result = cli("plan", "--platform", EXAMPLE, "--idle-hours", "8")
    assert result.exit_code == 0, result.stderr
    table = result.stdout.split("Scale to zero", 1)[1]
    row = next(line for line in table.splitlines() if line.startswith(f"│ {SPEC.name}"))
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    assert cells == _expected_row(8)
    assert "--idle-hours" in result.stdout


def test_the_json_carries_the_figures(cli: Cli) -> None:
    result = cli("plan", "--platform", EXAMPLE, "--json", "--idle-hours", "6")
    assert result.exit_code == 0, result.stderr
    (deployment,) = json.loads(result.stdout)["deployments"]
    zero = deployment["scale_to_zero"]
    assert zero["cold_start_seconds"] == round(COLD_START, 1)
    assert zero["cold_start_seconds"] == deployment["cold_start"]["total_seconds"]
    assert zero["idle_hours_per_day"] == 6
    assert zero["saved_per_idle_hour"] == round(PRICE, 2)
    assert zero["saved_per_day"] == round(PRICE * (6 - RETENTION_HOURS), 2)


def test_the_reference_plan_has_no_scale_to_zero_section(cli: Cli) -> None:
    result = cli("plan", "--platform", REFERENCE_PLATFORM, "--markdown")
    assert result.exit_code == 0, result.stderr
    assert "Scale to zero" not in result.stdout
    assert result.stdout == (REPO / "k8s_manifests" / "PLAN.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--platform", str(EXAMPLE), "--idle-hours", "25"), "--idle-hours 25: give the hours"),
        (("--platform", str(EXAMPLE), "--idle-hours", "-1"), "from 0 to 24"),
        (
            ("--model", "llama-3-8b", "--plot", "x.png", "--idle-hours", "8"),
            "--idle-hours prices the platform's deployments",
        ),
    ],
)
def test_idle_hours_that_cannot_be_are_bad_input(
    cli: Cli, args: tuple[str, ...], message: str
) -> None:
    result = cli("plan", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_the_docs_quote_the_examples_figures() -> None:
    """docs/scale-to-zero.md quotes what the plan prints for the example."""
    text = " ".join((REPO / "docs" / "scale-to-zero.md").read_text().split())
    at_zero = 12 - RETENTION_HOURS
    assert f"a {COLD_START:.0f} s cold start" in text
    assert f"{money(PRICE)} per idle hour and {money(PRICE * at_zero)} a day" in text
