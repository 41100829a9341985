"""Scale: 100 deployments of every kind stay far inside CloudFormation's limits.

CloudFormation accepts at most 500 resources per stack and a 1 MB template. Each deployment
lives in its own nested stack, so the parent grows by one resource per deployment and every
template stays small; the targets here leave headroom below the hard limits.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from bench.platforms import generated_platform
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.deployed import MANIFEST_TYPE, applied_differences
from tests.helpers.synthesis import STACK_NAME, Synthesized, cdk_context, lint_all, synthesize

pytestmark = [pytest.mark.synth, pytest.mark.xdist_group("synth")]

DEPLOYMENTS = 100
MAX_RESOURCES = 400
MAX_TEMPLATE_BYTES = 800_000
INSTANCE_LABEL = "app.kubernetes.io/instance"


@pytest.fixture(scope="module")
def platform() -> PlatformSpec:
    return generated_platform(DEPLOYMENTS)


@pytest.fixture(scope="module")
def scaled(platform: PlatformSpec, tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The app of ``DEPLOYMENTS`` generated deployments, synthesized once, cdk-nag on."""
    from aws_cdk import App

    from eks_inference.stacks import build_app

    outdir = tmp_path_factory.mktemp("cdk.out.scale")
    app, stack = build_app(platform, app=App(context=cdk_context(), outdir=str(outdir)))
    return synthesize(app, stack, outdir)


def test_every_template_is_within_the_targets(scaled: Synthesized) -> None:
    assert len(scaled.templates) == 1 + DEPLOYMENTS
    for key, template in scaled.templates.items():
        assert len(template["Resources"]) <= MAX_RESOURCES, key
        assert scaled.template_bytes[key] <= MAX_TEMPLATE_BYTES, key


def test_the_parent_grows_by_one_stack_resource_per_deployment(
    scaled: Synthesized, reference: Synthesized
) -> None:
    """Beyond the shared Mountpoint grants, everything a deployment adds is nested."""

    def shared(synth: Synthesized) -> Counter[str]:
        counts = Counter(r["Type"] for r in synth.templates[STACK_NAME]["Resources"].values())
        del counts["AWS::CloudFormation::Stack"]
        # CDK moves statements beyond a role's inline policy size into managed policies; the
        # Mountpoint role's grow with the number of distinct prefixes mounted.
        del counts["AWS::IAM::ManagedPolicy"]
        return counts

    parent = scaled.templates[STACK_NAME]["Resources"]
    stacks = [r for r in parent.values() if r["Type"] == "AWS::CloudFormation::Stack"]
    assert len(stacks) == DEPLOYMENTS
    assert shared(scaled) == shared(reference)
    overflow = [k for k, r in parent.items() if r["Type"] == "AWS::IAM::ManagedPolicy"]
    assert all("MountpointRoleOverflowPolicy" in k for k in overflow)
    # IAM attaches at most 10 managed policies to a role without a quota increase.
    assert len(overflow) <= 10


def test_each_nested_stack_holds_exactly_one_deployment(
    scaled: Synthesized, platform: PlatformSpec
) -> None:
    for spec in platform.deployments:
        template = scaled.templates[f"{STACK_NAME}/Deployment-{spec.name}"]
        manifests = [r for r in template["Resources"].values() if r["Type"] == MANIFEST_TYPE]
        assert manifests, spec.name
        for manifest in manifests:
            objects = json.loads(_without_tokens(manifest["Properties"]["Manifest"]))
            assert {o["metadata"]["labels"][INSTANCE_LABEL] for o in objects} == {spec.name}


def _without_tokens(manifest: str | dict[str, Any]) -> str:
    """The manifest's JSON text, each token (all inside JSON strings) replaced by text."""
    if isinstance(manifest, str):
        return manifest
    separator, parts = manifest["Fn::Join"]
    return str(separator).join(p if isinstance(p, str) else "TOKEN" for p in parts)


def test_synth_reports_nothing(scaled: Synthesized) -> None:
    """No cdk-nag finding and no CDK warning (template size, IAM policy quotas) at this scale."""
    report = json.loads((scaled.outdir / "validation-report.json").read_text())
    assert [v for r in report["pluginReports"] for v in r.get("violations", [])] == []


def test_cfn_lint_reports_no_errors_on_a_nested_stack_of_each_kind(
    scaled: Synthesized, platform: PlatformSpec
) -> None:
    kinds: dict[tuple[str, str, str], str] = {}
    for spec in platform.deployments:
        kind = (spec.engine, spec.accelerator.value, spec.weights.loader)
        kinds.setdefault(kind, f"{STACK_NAME}/Deployment-{spec.name}")
    assert len(kinds) == 4
    # The parent's structure is the reference app's (linted there) plus more stack resources.
    for key in kinds.values():
        errors = [
            f"{m.rule.id} {m.message}"
            for m in lint_all(scaled.template_files[key].read_text())
            if m.rule.severity == "error"
        ]
        assert errors == [], key


def test_each_deployment_applies_what_is_rendered_for_it_in_one_manifest_resource(
    scaled: Synthesized, platform: PlatformSpec
) -> None:
    compared, differences = applied_differences(scaled, platform)
    assert differences == []
    assert compared > DEPLOYMENTS
