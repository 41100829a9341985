"""Traffic splits: the typed rules (weights, targets, one engine, one model name), the Ingress
checked against the pinned controller's action schema, and no path opened beside the key."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from eks_inference.charts.ingress import ALB_ANNOTATION_PREFIX, ingress
from eks_inference.charts.render import SPLITS_FILE, render_files, split_chart
from eks_inference.specification.platform import PlatformSpec
from eks_inference.versions import KUBERNETES_VERSION
from tests.charts.test_ingress import DOCUMENTED_ANNOTATION_TEMPLATES, DOCUMENTED_ANNOTATIONS
from tests.helpers.platforms import EXAMPLES_DIR, platform_data
from tests.helpers.rendered import CONTEXT

EXAMPLE = EXAMPLES_DIR / "triton-canary.yaml"
# The fields of a forward action with weighted target groups, as the AWS Load Balancer
# Controller v3.5.0 reads them: Action, ForwardActionConfig and TargetGroupTuple of
# pkg/ingress/config_types.go at tag v3.5.0 (their json tags), and its rules: serviceName
# needs servicePort, and every group of a multi-group forward needs a weight.
ACTION_FIELDS = frozenset(
    {
        "type",
        "targetGroupARN",
        "targetGroupName",
        "fixedResponseConfig",
        "redirectConfig",
        "forwardConfig",
    }
)
FORWARD_FIELDS = frozenset({"targetGroups", "targetGroupStickinessConfig"})
TARGET_GROUP_FIELDS = frozenset(
    {"targetGroupARN", "targetGroupName", "serviceName", "servicePort", "weight"}
)


def data() -> dict[str, Any]:
    return platform_data(EXAMPLE)


@cache
def example() -> PlatformSpec:
    return PlatformSpec.model_validate(data())


def split_ingresses(platform: PlatformSpec) -> list[dict[str, Any]]:
    chart = split_chart(platform, CONTEXT)
    assert chart is not None
    return list(chart.objects)


def _problems(content: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as error:
        PlatformSpec.model_validate(content)
    return str(error.value)


def test_the_split_ingress_validates_and_uses_documented_annotations() -> None:
    (split,) = split_ingresses(example())
    kubernetes_validate.validate(split, KUBERNETES_VERSION, strict=True)
    for key in split["metadata"]["annotations"]:
        name = key.removeprefix(ALB_ANNOTATION_PREFIX)
        assert name in DOCUMENTED_ANNOTATIONS or name.startswith(DOCUMENTED_ANNOTATION_TEMPLATES), (
            key
        )


def test_the_action_follows_the_controllers_schema() -> None:
    (split,) = split_ingresses(example())
    annotations = split["metadata"]["annotations"]
    (path,) = split["spec"]["rules"][0]["http"]["paths"]
    backend = path["backend"]["service"]
    assert backend["port"] == {"name": "use-annotation"}
    action = json.loads(annotations[f"{ALB_ANNOTATION_PREFIX}actions.{backend['name']}"])
    assert set(action) <= ACTION_FIELDS
    assert action["type"] == "forward"
    assert set(action["forwardConfig"]) <= FORWARD_FIELDS
    groups = action["forwardConfig"]["targetGroups"]
    for group in groups:
        assert set(group) <= TARGET_GROUP_FIELDS
        assert group["servicePort"] == 8000
        assert isinstance(group["weight"], int)
    assert [(g["serviceName"], g["weight"]) for g in groups] == [
        ("mistral-stable", 90),
        ("mistral-canary", 10),
    ]
    assert sum(g["weight"] for g in groups) == 100
    transform = json.loads(annotations[f"{ALB_ANNOTATION_PREFIX}transforms.{backend['name']}"])
    assert transform[0]["urlRewriteConfig"]["rewrites"][0]["regex"] == "^/chat/(.*)$"


def test_the_split_opens_only_the_openai_api_of_exposed_targets() -> None:
    """One path, /chat/v1, to deployments whose own Ingress (and so whose servers' key check)
    exists: nothing the key does not guard is reachable through the split."""
    platform = example()
    (split,) = split_ingresses(platform)
    (path,) = split["spec"]["rules"][0]["http"]["paths"]
    assert path["path"] == "/chat/v1"
    assert path["pathType"] == "Prefix"
    assert "defaultBackend" not in split["spec"]
    routes = platform.routes()
    for route, _ in platform.splits()[0].targets:
        assert route.api_key
        own = ingress(platform.deployment(route.deployment), route, CONTEXT.vpc_cidr)
        own_annotations = own["metadata"]["annotations"]
        # The same load balancer and the same health check as the target's own route.
        for key in ("group.name", "scheme", "listen-ports", "healthcheck-path", "inbound-cidrs"):
            annotation = f"{ALB_ANNOTATION_PREFIX}{key}"
            assert split["metadata"]["annotations"][annotation] == own_annotations[annotation]
    assert set(routes) >= {"mistral-stable", "mistral-canary"}


def test_the_manifests_hold_the_split_once() -> None:
    files = render_files(example(), CONTEXT)
    documents = list(yaml.safe_load_all(files[SPLITS_FILE]))
    assert [d["metadata"]["name"] for d in documents] == ["split-chat"]


def test_weights_not_summing_to_100_name_the_field_and_the_fix() -> None:
    content = data()
    content["endpoint"]["splits"][0]["traffic"][1]["weight"] = 5
    message = _problems(content)
    assert re.search(
        r"endpoint\.splits\.0\.traffic\n.*90 \+ 5 sum to 95.*must sum to 100: e\.g\. set the "
        r"last weight to 10",
        message,
    )


def test_a_split_naming_an_unexposed_deployment_names_the_field_and_the_fix() -> None:
    content = data()
    canary = next(d for d in content["deployments"] if d["name"] == "mistral-canary")
    canary["endpoint"] = {"expose": False}
    message = _problems(content)
    assert re.search(
        r"endpoint\.splits\.0\.traffic\.1\.deployment\n.*'mistral-canary' is not exposed "
        r"\(deployments\.2\.endpoint\.expose: false\).*expose it, or take it out of the split",
        message,
    )


def test_a_split_naming_no_deployment_lists_the_names() -> None:
    content = data()
    content["endpoint"]["splits"][0]["traffic"][1]["deployment"] = "mistral-next"
    assert re.search(
        r"endpoint\.splits\.0\.traffic\.1\.deployment\n.*no deployment is named 'mistral-next'",
        _problems(content),
    )


def test_targets_must_run_one_engine_and_serve_one_model() -> None:
    content = data()
    content["endpoint"]["splits"][0]["traffic"][1]["deployment"] = "qwen-triton"
    message = _problems(content)
    assert "targets run engines triton, vllm" in message
    assert "serve different model names" in message


def test_a_split_may_not_take_a_deployments_route() -> None:
    content = data()
    content["endpoint"]["splits"][0]["path"] = "/mistral-stable"
    assert re.search(
        r"endpoint\.splits\.0\.path\n.*overlaps the route of 'mistral-stable'", _problems(content)
    )
