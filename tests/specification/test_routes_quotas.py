"""The load balancer's and the stack's quotas at their boundaries, counted as the charts and
the stack create what takes them.

A Triton deployment with framework models takes two listener rules (``/v1`` and
``/v2/models``), a split one rule and a target group per target, and every route and split
a base-URL output: a platform exactly at a quota validates, one more fails under the field
with the numbers. The counts are checked against what is rendered: the listener rules
against the paths of every Ingress the charts write (the controller makes a rule of each).
"""

from __future__ import annotations

import copy
from typing import Any

from eks_inference.charts.ingress import ingress
from eks_inference.charts.render import split_chart
from eks_inference.specification.cloudformation_limits import MAX_OUTPUTS
from eks_inference.specification.platform import PlatformSpec
from eks_inference.specification.routes import MAX_LISTENER_RULES, MAX_TARGET_GROUPS
from tests.helpers.errors import problems_of
from tests.helpers.platforms import EXAMPLES_DIR, example, reference
from tests.helpers.rendered import CONTEXT

EXAMPLE = EXAMPLES_DIR / "triton-canary.yaml"

FIX = "set endpoint.expose: false on some deployments, or remove splits"


def _example() -> dict[str, Any]:
    """The example platform: Triton with an ONNX model (2 rules, 1 target group), two vLLM
    deployments (1 and 1) and a split between them (1 rule, 2 target groups)."""
    data = example("triton-canary")
    data["node_pools"][1]["max_size"] = 1000
    return data


def _add_tritons(data: dict[str, Any], count: int, start: int = 0) -> None:
    triton = data["deployments"][0]
    data["deployments"] += [
        {**copy.deepcopy(triton), "name": f"t{i}"} for i in range(start, start + count)
    ]


def _add_vllms(data: dict[str, Any], count: int, start: int = 0) -> None:
    vllm = data["deployments"][2]
    data["deployments"] += [
        {**copy.deepcopy(vllm), "name": f"v{i}"} for i in range(start, start + count)
    ]


def _add_split(data: dict[str, Any], name: str, targets: list[str]) -> None:
    weights = [100 // len(targets)] * len(targets)
    weights[0] += 100 - sum(weights)
    data["endpoint"]["splits"].append(
        {
            "name": name,
            "traffic": [
                {"deployment": t, "weight": w} for t, w in zip(targets, weights, strict=True)
            ],
        }
    )


def _rendered_rules(platform: PlatformSpec) -> int:
    """The listener rules the controller makes of the rendered Ingresses: one per path."""
    routes = platform.routes()
    ingresses = [
        ingress(spec, routes[spec.name], CONTEXT.vpc_cidr)
        for spec in platform.deployments
        if spec.name in routes
    ]
    chart = split_chart(platform, CONTEXT)
    ingresses += list(chart.objects) if chart is not None else []
    return sum(len(rule["http"]["paths"]) for obj in ingresses for rule in obj["spec"]["rules"])


def _at_the_rule_quota() -> dict[str, Any]:
    # 2 + 47 * 2 Triton rules, 3 vLLM rules, 1 split rule: 100; 53 target groups.
    data = _example()
    _add_tritons(data, 47)
    _add_vllms(data, 1)
    return data


def test_a_platform_at_the_listener_rule_quota_validates() -> None:
    platform = PlatformSpec.model_validate(_at_the_rule_quota())
    assert MAX_LISTENER_RULES == 100
    assert _rendered_rules(platform) == MAX_LISTENER_RULES
    routes = platform.routes()
    assert sum(route.listener_rules for route in routes.values()) == 99
    assert routes["t0"].api_paths == ("/v1", "/v2/models")


def test_one_more_split_is_one_rule_too_many() -> None:
    data = _at_the_rule_quota()
    _add_split(data, "chat-b", ["mistral-stable", "mistral-canary"])
    assert problems_of(data) == [
        (
            "endpoint",
            "the load balancer would need 101 listener rules, 99 for the API paths of 51 "
            "exposed deployments (one per path; 48 serve more than /v1, e.g. qwen-triton: /v1, "
            f"/v2/models) and 2 for 2 splits, over the 100 an ALB holds; {FIX}",
        )
    ]


def test_one_more_triton_deployment_is_two_rules_where_one_fits() -> None:
    """At 99 rules there is room for a vLLM deployment, not for Triton with framework models."""
    data = _example()
    _add_tritons(data, 46)
    _add_vllms(data, 2)
    assert _rendered_rules(PlatformSpec.model_validate(data)) == 99
    with_vllm = copy.deepcopy(data)
    _add_vllms(with_vllm, 1, start=2)
    assert _rendered_rules(PlatformSpec.model_validate(with_vllm)) == 100
    _add_tritons(data, 1, start=46)
    ((field, message),) = problems_of(data)
    assert field == "endpoint"
    assert message.startswith(
        "the load balancer would need 101 listener rules, 100 for the API paths of 52 "
        "exposed deployments (one per path; 48 serve more than /v1"
    )


def _at_the_target_group_quota() -> dict[str, Any]:
    # 3 + 45 deployments' target groups, 2 for the example's split and 5 for each of 10
    # more: 100; 48 + 11 = 59 listener rules.
    data = _example()
    _add_vllms(data, 45)
    for k in range(10):
        _add_split(data, f"ab{k}", [f"v{5 * (k % 9) + j}" for j in range(5)])
    return data


def test_a_platform_at_the_target_group_quota_validates() -> None:
    platform = PlatformSpec.model_validate(_at_the_target_group_quota())
    assert MAX_TARGET_GROUPS == 100
    groups = sum(r.target_groups for r in platform.routes().values())
    assert groups + sum(s.target_groups for s in platform.splits()) == MAX_TARGET_GROUPS


def test_one_more_target_group_fails_with_the_counts() -> None:
    data = _at_the_target_group_quota()
    _add_vllms(data, 1, start=45)
    assert problems_of(data) == [
        (
            "endpoint",
            "the load balancer would need 101 target groups, 49 for 49 exposed deployments "
            "and 52 for the targets of 11 splits (one per target), over the 100 an ALB holds; "
            f"{FIX}",
        )
    ]


# -- the stack's outputs: a base URL per exposed deployment and per split ---------------------


def _reference_with(exposed: int, splits: int) -> dict[str, Any]:
    """The reference platform with ``exposed`` vLLM deployments of one model and ``splits``
    splits between the first two: 3 outputs beside the base URLs (the core's two and the
    API-key command)."""
    data = reference()
    data["node_pools"][2]["max_size"] = 1000
    template = data["deployments"][1]
    data["deployments"] = [
        {**template, "name": f"m{i}", "scaling": {"min_replicas": 1, "max_replicas": 1}}
        for i in range(exposed)
    ]
    data["endpoint"] = {
        "splits": [
            {"name": f"s{k}", "traffic": [{"deployment": f"m{j}", "weight": 50} for j in (0, 1)]}
            for k in range(splits)
        ]
    }
    return data


def _output_errors(data: dict[str, Any]) -> list[str]:
    # The listener-rule quota is exceeded too (every output is a route); these are the others.
    return [message for field, message in problems_of(data) if field == "deployments"]


def test_the_outputs_quota_counts_the_splits_base_urls() -> None:
    assert MAX_OUTPUTS == 200
    # 187 + 10 base URLs and 3 more outputs: 200.
    assert _output_errors(_reference_with(187, 10)) == []
    assert _output_errors(_reference_with(187, 11)) == [
        "the stack would have 201 outputs, 198 of them base URLs (one per exposed deployment "
        "and per traffic split), over CloudFormation's 200 per stack; expose 1 fewer "
        "deployments, or remove splits"
    ]
