"""``plan`` prices pools at their capacity type and warns where spot capacity is scarce."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import Result

from eks_inference.catalog import INSTANCE_TYPES
from eks_inference.catalog.spot_prices import (
    SCARCE_SPOT_FAMILIES,
    SPOT_PRICES,
    SPOT_PRICES_DATE,
    SPOT_PRICES_SOURCE,
)
from eks_inference.ops.plan import plan_platform
from eks_inference.ops.quotas import vcpu_quota
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import REFERENCE_PLATFORM, reference


def _platform_file(tmp_path: Path, **pools: dict[str, Any]) -> Path:
    """The reference platform in Karpenter mode with ``pools`` changed (by name)."""
    data = reference()
    data["node_provisioning"] = "karpenter"
    for pool in data["node_pools"]:
        pool.update(pools.get(pool["name"], {}))
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _plan(cli: Callable[..., Result], path: Path, *args: str) -> dict[str, Any]:
    result = cli("plan", "--platform", path, "--json", *args)
    assert result.exit_code == 0, result.output
    plan: dict[str, Any] = json.loads(result.stdout)
    return plan


def test_spot_prices_are_dated_data_for_the_scarce_families() -> None:
    assert SPOT_PRICES_DATE in SPOT_PRICES_SOURCE
    assert {"inf2", "g6e"} == SCARCE_SPOT_FAMILIES
    for name, price in SPOT_PRICES.items():
        assert INSTANCE_TYPES[name].family in SCARCE_SPOT_FAMILIES
        assert 0 < price < INSTANCE_TYPES[name].price_per_hour, name


def test_a_spot_pool_and_its_deployments_are_priced_at_spot(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    path = _platform_file(
        tmp_path, inf2={"capacity_type": "SPOT", "fallback_capacity_types": ["ON_DEMAND"]}
    )
    plan = _plan(cli, path)
    pools = {p["name"]: p for p in plan["node_pools"]}
    spot = SPOT_PRICES["inf2.48xlarge"]
    assert pools["inf2"]["price_per_hour"] == spot
    assert pools["inf2"]["price_source"] == "spot"
    assert pools["inf2"]["fallback_capacity_types"] == ["ON_DEMAND"]
    assert pools["inf2"]["price_per_hour_max"] == pytest.approx(3 * spot)
    assert pools["g6e"]["price_source"] == "catalog"
    (llama,) = (d for d in plan["deployments"] if d["name"] == "llama3-8b-inf2")
    assert llama["price_per_hour"] == spot
    assert llama["price_source"] == "spot"
    on_demand = plan_platform(PlatformSpec.from_yaml(REFERENCE_PLATFORM))
    (reference_llama,) = (d for d in on_demand.deployments if d.name == "llama3-8b-inf2")
    ratio = spot / INSTANCE_TYPES["inf2.48xlarge"].price_per_hour
    assert llama["cost_per_million_tokens"] == pytest.approx(
        reference_llama.configuration.cost_per_million_tokens * ratio
    )
    (warning,) = [w for w in plan["warnings"] if w.startswith("pool ")]
    assert "pool 'inf2' allows spot inf2.48xlarge" in warning
    assert "may be unavailable" in warning
    assert "it falls back to ON_DEMAND" in warning


def test_spot_without_a_fallback_or_a_catalog_price_is_warned_about(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    path = _platform_file(
        tmp_path,
        g6e={"capacity_type": "SPOT", "instance_types": ["g6e.4xlarge"]},
    )
    data = yaml.safe_load(path.read_text())
    for deployment in data["deployments"]:
        if deployment["instance_type"] == "g6e.2xlarge":
            deployment["instance_type"] = "g6e.4xlarge"
    path.write_text(yaml.safe_dump(data))
    plan = _plan(cli, path)
    warnings = plan["warnings"]
    assert any("add ON_DEMAND to fallback_capacity_types" in w for w in warnings)
    assert any("no spot price for g6e.4xlarge; it is priced on-demand" in w for w in warnings)
    pools = {p["name"]: p for p in plan["node_pools"]}
    assert pools["g6e"]["price_per_hour"] == INSTANCE_TYPES["g6e.4xlarge"].price_per_hour
    overridden = _plan(cli, path, "--spot-price", "g6e.4xlarge=1.25")
    pools = {p["name"]: p for p in overridden["node_pools"]}
    assert pools["g6e"]["price_per_hour"] == 1.25
    assert pools["g6e"]["price_source"] == "spot given"
    assert not any("no spot price" in w for w in overridden["warnings"])


def test_the_markdown_and_the_tables_show_the_warnings(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    path = _platform_file(tmp_path, g6e={"capacity_type": "SPOT"})
    markdown = cli("plan", "--platform", path, "--markdown")
    assert markdown.exit_code == 0, markdown.output
    assert "**Warning**: pool 'g6e' allows spot g6e.2xlarge" in markdown.stdout
    assert "| g6e | g6e.2xlarge | SPOT | 0-8 | $0.99 (spot) |" in markdown.stdout
    tables = cli("plan", "--platform", path)
    assert tables.exit_code == 0, tables.output
    assert "Warnings" in tables.stdout
    assert f"spot prices of {SPOT_PRICES_DATE}" in tables.stdout


def test_the_reference_plan_has_no_capacity_warnings(cli: Callable[..., Result]) -> None:
    plan = _plan(cli, REFERENCE_PLATFORM)
    assert [w for w in plan["warnings"] if w.startswith("pool ")] == []
    assert {p["price_source"] for p in plan["node_pools"]} == {"catalog"}


def test_reserved_capacity_is_priced_on_demand_and_counts_against_on_demand_quota(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    path = _platform_file(
        tmp_path,
        inf2={"capacity_type": "RESERVED", "capacity_reservation_ids": ["cr-0123456789abcdef0"]},
    )
    pools = {p["name"]: p for p in _plan(cli, path)["node_pools"]}
    assert pools["inf2"]["price_per_hour"] == INSTANCE_TYPES["inf2.48xlarge"].price_per_hour
    instance = INSTANCE_TYPES["inf2.48xlarge"]
    assert vcpu_quota(instance, "RESERVED") == vcpu_quota(instance, "ON_DEMAND")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("inf2.48xlarge", "must be TYPE=USD"),
        ("inf9.xlarge=1", "unknown instance type 'inf9.xlarge'"),
        ("inf2.48xlarge=cheap", "'cheap' is not a number"),
        ("inf2.48xlarge=-1", "the price must be a positive number"),
        ("inf2.48xlarge=nan", "the price must be a positive number"),
    ],
)
def test_bad_spot_prices_are_one_line_errors(
    cli: Callable[..., Result], value: str, message: str
) -> None:
    result = cli("plan", "--platform", REFERENCE_PLATFORM, "--spot-price", value)
    one_line_error(result, 2, message)


def test_spot_prices_are_for_the_platform_plan(cli: Callable[..., Result]) -> None:
    result = cli("plan", "--model", "llama-3-8b", "--spot-price", "inf2.48xlarge=5")
    assert result.exit_code == 2
    assert "use --price-per-hour" in result.stderr
