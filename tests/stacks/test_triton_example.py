"""The Triton and canary example (examples/triton-canary.yaml) synthesizes credential-free,
cdk-nag and cfn-lint clean, with the split's Ingress applied after the deployments it routes to."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from eks_inference.specification.cloudformation_limits import mounted_prefixes
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.deployed import manifest_resources
from tests.helpers.platforms import REPO
from tests.helpers.synthesis import STACK_NAME, Synthesized, example_group, lint_all
from tests.stacks.test_cloudformation_limits import check_parent_stack_use

EXAMPLE = REPO / "examples" / "triton-canary.yaml"
# With the example's own test (tests/stacks/test_examples.py), which synthesizes and lints the
# same app: on one worker, each is done once.
EXAMPLE_GROUP = example_group(EXAMPLE)


@pytest.fixture(scope="module")
def example(synthesized_platform: Callable[[PlatformSpec], Synthesized]) -> Synthesized:
    return synthesized_platform(PlatformSpec.from_yaml(EXAMPLE))


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_example_is_nag_and_lint_clean(example: Synthesized) -> None:
    report = json.loads((example.outdir / "validation-report.json").read_text())
    assert report["pluginReports"] == []
    for name, template in example.templates.items():
        errors = [
            f"{m.rule.id} {m.message}"
            for m in lint_all(json.dumps(template))
            if m.rule.severity == "error"
        ]
        assert errors == [], name


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_split_is_applied_after_its_targets(example: Synthesized) -> None:
    main = example.templates[STACK_NAME]
    (split_id,) = [k for k in manifest_resources(main) if k.startswith("TrafficSplits")]
    split = main["Resources"][split_id]
    depends = set(split.get("DependsOn", []))
    for target in ("mistral-stable", "mistral-canary"):
        stack_ids = [
            k
            for k, r in main["Resources"].items()
            if r["Type"] == "AWS::CloudFormation::Stack" and target.replace("-", "") in k
        ]
        assert stack_ids, target
        assert set(stack_ids) <= depends, target
    outputs = main["Outputs"]
    assert any(k.startswith("EndpointsBaseUrlsplitchat") for k in outputs), sorted(outputs)


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_quota_estimate_counts_the_splits_outputs_and_manifest(example: Synthesized) -> None:
    """The split's base URL and Ingress manifest, and the framework models' prefix the
    Mountpoint driver is granted, are in the parent stack's estimate as the stack makes them."""
    outputs = example.templates[STACK_NAME]["Outputs"]
    assert len([k for k in outputs if k.startswith("EndpointsBaseUrl")]) == 4
    platform: PlatformSpec = example.stack.platform
    estimated = mounted_prefixes(platform.deployments)
    assert "triton/qwen-triton/" in estimated
    assert sorted(estimated) == list(example.stack.mountpoint_prefixes)
    check_parent_stack_use(example)


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_triton_deployment_applies_its_repository(example: Synthesized) -> None:
    key = next(k for k in example.templates if k.endswith("Deployment-qwen-triton"))
    text = json.dumps(example.templates[key])
    assert "qwen-triton-model-repository" in text
    assert "qwen.config.pbtxt" in text
    assert "nvcr.io" not in text  # the example names its own image, by digest
