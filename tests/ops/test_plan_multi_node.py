"""``plan`` of replicas across nodes: the group, what it costs, its cold start, the capacity
and fabric it warns about, and the replica series its alerts read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from eks_inference.catalog import sizing
from eks_inference.charts.render import render_platform
from eks_inference.ops.plan import plan_deployment, plan_platform, plan_warnings
from eks_inference.specification.cold_start import cold_start
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.objects import of_kind
from tests.helpers.observed import PROMTOOL, PROMTOOL_MISSING, promtool_check_rules
from tests.helpers.platforms import REPO, platform_data
from tests.helpers.rendered import CONTEXT

EXAMPLE = REPO / "examples" / "multi-node.yaml"
PLATFORM = PlatformSpec.from_yaml(EXAMPLE)


@pytest.mark.parametrize(("name", "nodes"), [("llama-405b-fp8", 2), ("qwen3-coder-480b", 4)])
def test_a_group_is_planned_as_its_nodes(name: str, nodes: int) -> None:
    spec = PLATFORM.deployment(name)
    plan = plan_deployment(spec)
    configuration = plan.configuration
    assert (configuration.nodes_per_replica, configuration.accelerators_per_replica) == (
        nodes,
        8 * nodes,
    )
    assert (plan.nodes_min, plan.nodes_max) == (nodes, nodes)
    price = spec.instance.price_per_hour
    assert plan.price_per_hour_max == pytest.approx(nodes * price)
    # Memory is the group's, and the cost per million tokens pays for every node of it.
    assert configuration.accelerator_memory_gib == pytest.approx(
        sizing.gib(nodes * 8 * spec.instance.memory_per_core_bytes)
    )
    assert configuration.cost_per_million_tokens == pytest.approx(
        sizing.cost_per_million_tokens(nodes * price, configuration.tokens_per_second)
    )
    # Every node loads its own stage, a share of the weights, at once.
    single = cold_start(spec.model_copy(update={"multi_node": None}))
    weights = {p.name: p.seconds for p in cold_start(spec).phases}
    alone = {p.name: p.seconds for p in single.phases}
    assert weights["weights"] == pytest.approx(alone["weights"] / nodes)


def test_p5_without_reserved_capacity_is_warned_about_and_g6e_is_not() -> None:
    warnings = plan_warnings(PLATFORM)
    (p5,) = (w for w in warnings if "p5.48xlarge" in w and "Capacity" in w)
    assert "without a Capacity Reservation or Capacity Block" in p5
    assert "capacity_reservation_ids" in p5
    assert not [w for w in warnings if "g6e.48xlarge" in w and "Capacity" in w]


def test_a_group_on_efa_nodes_is_not_warned_of_tcp() -> None:
    warnings = plan_warnings(PLATFORM)
    assert [w for w in warnings if "TCP" in w] == []
    # The other warnings still come: p5 on demand without a reservation.
    assert any("'p5'" in w for w in warnings)


def test_a_group_on_a_pool_that_turns_efa_off_is_warned_of_tcp() -> None:
    data = platform_data(EXAMPLE)
    data["node_pools"][1]["efa"] = False
    data["deployments"][0]["multi_node"]["allow_without_efa"] = True
    (tcp,) = (w for w in plan_warnings(PlatformSpec.model_validate(data)) if "TCP" in w)
    assert "'llama-405b-fp8' spans 2 p5.48xlarge nodes whose pool turns EFA off" in tcp


def test_a_group_without_efa_is_admitted_only_with_a_bandwidth_warning() -> None:
    data = platform_data(EXAMPLE)
    data["node_pools"].append(
        {"name": "g6e-small", "instance_types": ["g6e.4xlarge"], "max_size": 4, "zones": [0]}
    )
    data["deployments"].append(
        {
            "name": "llama-8b-split",
            "model": "llama-3-8b",
            "instance_type": "g6e.4xlarge",
            "engine": "vllm",
            "multi_node": {"nodes_per_replica": 2, "allow_without_efa": True},
            "weights": {"prefix": "models/llama-3-8b/", "loader": "runai_streamer"},
        }
    )
    warnings = plan_warnings(PlatformSpec.model_validate(data))
    (tcp,) = (w for w in warnings if "llama-8b-split" in w)
    assert "2 g6e.4xlarge nodes without EFA" in tcp
    assert "TCP on 20 Gbps" in tcp


def test_the_plan_json_carries_the_group() -> None:
    plan = json.loads(json.dumps(plan_platform(PLATFORM).as_json()))
    (llama,) = (d for d in plan["deployments"] if d["name"] == "llama-405b-fp8")
    assert (llama["nodes_per_replica"], llama["accelerators_per_replica"]) == (2, 16)


def _rules(name: str) -> list[dict[str, Any]]:
    objects = render_platform(PLATFORM, CONTEXT)[name]
    (rule,) = of_kind(objects, "PrometheusRule")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


@pytest.mark.skipif(PROMTOOL is None, reason=PROMTOOL_MISSING)
def test_the_alerts_count_ready_leaders_and_promtool_accepts_them(tmp_path: Path) -> None:
    groups = _rules("llama-405b-fp8")
    text = yaml.safe_dump(groups)
    # No Deployment serves a group: its replicas are its ready leaders.
    assert "kube_deployment_status_replicas_available" not in text
    assert 'label_app_kubernetes_io_component="vllm"' in text
    result = promtool_check_rules(groups, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_deployments_table_names_each_group() -> None:
    from eks_inference.cli.plan_cells import deployment_cells

    rows = {d.name: deployment_cells(d) for d in plan_platform(PLATFORM).deployments}
    assert rows["llama-405b-fp8"][3] == "1 per 2 nodes (16 GPUs)"
    assert rows["qwen3-coder-480b"][3] == "1 per 4 nodes (32 GPUs)"
    assert rows["llama-405b-fp8"][4] == "2-2"
