"""``plan`` with KV-cache tiers: the tokens each tier holds, and tiers that cannot work."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import Result

from eks_inference.catalog import MODELS, sizing
from tests.helpers.cli import run_cli
from tests.helpers.errors import one_line_error
from tests.helpers.platforms import EXAMPLES_DIR, platform_data

EXAMPLE = EXAMPLES_DIR / "lmcache.yaml"


def test_plan_prints_the_tokens_each_tier_holds(cli: Callable[..., Result]) -> None:
    result = cli("plan", "--platform", EXAMPLE, "--json")
    assert result.exit_code == 0, result.stderr
    (deployment,) = (d for d in json.loads(result.stdout)["deployments"] if d["kv_tiers"])
    tiers = {t["tier"]: t for t in deployment["kv_tiers"]}
    per_token = sizing.kv_cache_bytes_per_token(MODELS["mistral-7b"].architecture)
    assert tiers["CPU"]["gib"] == 32
    assert tiers["CPU"]["tokens"] == 32 * 1024**3 // per_token == 262_144
    assert 0 < tiers["GPU"]["tokens"] < tiers["CPU"]["tokens"]
    table = cli("plan", "--platform", EXAMPLE)
    assert table.exit_code == 0, table.stderr
    assert "KV cache tiers (per replica)" in table.stdout
    assert "262,144" in table.stdout


@pytest.mark.parametrize(
    ("kv_cache", "expected"),
    [
        (
            {"offload": "cpu", "cpu_gib": 60},
            ("deployments.0.kv_cache.cpu_gib", "does not fit g6e.2xlarge", "cpu_gib <= 39"),
        ),
        (
            {"offload": "cpu+disk", "cpu_gib": 8, "disk_gib": 1000},
            ("deployments.0.kv_cache.disk_gib", "local NVMe", "disk_gib <= 319"),
        ),
    ],
)
def test_a_tier_that_does_not_fit_is_bad_input(
    tmp_path: Path, kv_cache: dict[str, object], expected: tuple[str, ...]
) -> None:
    platform = platform_data(EXAMPLE)
    platform["deployments"][0]["kv_cache"] = kv_cache
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform))
    one_line_error(run_cli("plan", "--platform", path, cwd=tmp_path), 2, *expected)
