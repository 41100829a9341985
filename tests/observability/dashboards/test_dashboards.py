"""Dashboards: one layout per deployment kind, every panel on known metrics, valid PromQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eks_inference.catalog import Accelerator
from eks_inference.charts.serving import serving_engine
from eks_inference.metrics import unknown_metrics
from eks_inference.observability.dashboards import dashboard, expressions, uid
from eks_inference.observability.signals import signals_of
from eks_inference.specification.deployment import ModelDeploymentSpec
from eks_inference.specification.engine_registry import ENGINES
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.observed import AUTOSCALED, PROMTOOL, PROMTOOL_MISSING, promtool_check_rules
from tests.helpers.platforms import EXAMPLES, REFERENCE_PLATFORM
from tests.helpers.rendered import variants_spec

PLATFORMS = [
    PlatformSpec.from_yaml(REFERENCE_PLATFORM),
    variants_spec(),
    AUTOSCALED,
    *(PlatformSpec.from_yaml(path) for path in EXAMPLES),
]
SPECS = [spec for platform in PLATFORMS for spec in platform.deployments]
REQUIRED_PANELS = {
    "Requests running and waiting",
    "Time to first token",
    "Inter-token latency",
    "Tokens per second",
    "KV-cache use",
    "Replicas",
    "Cost per million generated tokens",
}


def test_every_kind_is_covered() -> None:
    """Every registered engine on every accelerator it runs on has a dashboard under test."""
    covered = {(spec.engine, spec.accelerator) for spec in SPECS}
    assert covered == {
        (engine.name, accelerator)
        for engine in ENGINES
        for accelerator in engine.accelerators
        if accelerator is not Accelerator.NONE
    }
    kinds = {serving_engine(spec).kind(spec) for spec in SPECS}
    assert len({kind.tag for kind in kinds}) == len(covered)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_panel_reads_metrics_the_pinned_versions_emit(spec: ModelDeploymentSpec) -> None:
    board = dashboard(spec)
    queries = list(expressions(board))
    assert queries
    for title, expr in queries:
        assert not unknown_metrics(expr), (title, expr)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_layout_shows_what_an_operator_needs(spec: ModelDeploymentSpec) -> None:
    board = dashboard(spec)
    titles = {p["title"] for p in board["panels"]}
    # An engine without a KV-cache metric (Triton's vLLM backend) has no KV-cache panel.
    exported = serving_engine(spec).metrics(spec).kv_cache is not None
    assert titles >= REQUIRED_PANELS - (set() if exported else {"KV-cache use"})
    accelerator = "NeuronCore" if spec.on_neuron else "GPU"
    assert {f"{accelerator} utilization", f"{accelerator} memory used"} <= titles
    assert len(board["uid"]) <= 40
    # Panels tile the 24-column grid without overlapping.
    cells = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))
    json.dumps(board)


def test_thresholds_and_price_come_from_the_signals() -> None:
    spec = PLATFORMS[0].deployment("mistral-7b-g6e")
    signals = signals_of(spec)
    panels = {p["title"]: p for p in dashboard(spec)["panels"]}
    kv = panels["KV-cache use"]["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in kv] == [None, signals.kv_cache_scale_target, signals.kv_cache_alert]
    cost = panels["Cost per million generated tokens"]
    assert f"{spec.instance.price_per_hour}" in cost["targets"][0]["expr"]
    assert f"${spec.instance.price_per_hour:.2f} per node-hour" in cost["description"]


def test_uids_are_unique_and_fit() -> None:
    names = ["a" * 40, "a" * 39 + "b", "short"]
    uids = [uid(n) for n in names]
    assert len(set(uids)) == 3
    assert all(len(u) <= 40 for u in uids)


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each panel's query, as the expression of a recording rule."""
    rules = [
        {"record": f"check:{i}", "expr": expr}
        for i, (_, expr) in enumerate(e for spec in SPECS for e in expressions(dashboard(spec)))
    ]
    result = promtool_check_rules([{"name": "dashboards", "rules": rules}], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_readme_picture_draws_every_panel(tmp_path: Path) -> None:
    from eks_inference.observability.dashboards.picture import render

    spec = PLATFORMS[0].deployment("qwen25-7b-g6e")
    out = tmp_path / "dashboard.png"
    board = render(spec, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert board == dashboard(spec)
