"""`eks-inference plan` names, per deployment, the metrics to watch and the thresholds chosen."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from eks_inference.observability.signals import signals_of
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REFERENCE_PLATFORM

Cli = Callable[..., Result]


def test_the_table_lists_metrics_and_thresholds_per_deployment(cli: Cli) -> None:
    result = cli("plan", "--platform", REFERENCE_PLATFORM)
    assert result.exit_code == 0, result.stderr
    text = result.stdout.split("What to watch", 1)[1]
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    for spec in platform.deployments:
        assert spec.name in text
    for signal in ("KV-cache use", "ready replicas", "replica loading"):
        assert signal in text


def test_markdown_and_json_carry_the_watch_list(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "PLAN.md"
    assert (
        cli("plan", "--platform", REFERENCE_PLATFORM, "--markdown", "--output", out).exit_code == 0
    )
    markdown = out.read_text()
    assert "## What to watch" in markdown
    assert (
        "| mistral-7b-g6e | KV-cache use | vllm:kv_cache_usage_perc | > 90% on any replica |"
        in markdown
    )
    result = cli("plan", "--platform", REFERENCE_PLATFORM, "--json")
    assert result.exit_code == 0, result.stderr
    deployments = json.loads(result.stdout)["deployments"]
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    for deployment in deployments:
        spec = platform.deployment(deployment["name"])
        expected = signals_of(spec).watch_list()
        assert [w["query"] for w in deployment["watch"]] == [w.query for w in expected]
        assert [w["signal"] for w in deployment["watch"]][:4] == [
            "requests waiting",
            "KV-cache use",
            "ready replicas",
            "replica loading",
        ]
        loading = deployment["watch"][3]["threshold"]
        assert loading == f"longer than {signals_of(spec).loading_alert_seconds} s"
