"""The example KServe platform synthesizes credential-free, clean under cdk-nag and cfn-lint, with
the KServe add-on's Helm values all keys of the pinned charts and no AWS role for it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from eks_inference import versions
from eks_inference.charts.serving import engine_needs
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.helm_values import missing_keys
from tests.helpers.platforms import REFERENCE_PLATFORM, REPO
from tests.helpers.synthesis import Synthesized, cfn_lint_errors, example_group

EXAMPLE = REPO / "examples" / "kserve-platform.yaml"
# With the example's own test (tests/stacks/test_examples.py), which synthesizes and lints the
# same app: on one worker, each is done once.
EXAMPLE_GROUP = example_group(EXAMPLE)
UPSTREAM = REPO / "tests" / "upstream"
LATEST = re.compile(r"(?<![A-Za-z])latest(?![A-Za-z])")
# The pinned values.yaml of each chart the add-on installs (headers name their source).
VALUES = {
    versions.CERT_MANAGER_CHART.chart: "cert-manager-v1.21.1-values.yaml",
    versions.KNATIVE_OPERATOR_CHART.chart: "knative-operator-v1.21.4-values.yaml",
    versions.KSERVE_CHART.chart: "kserve-resources-v0.20.0-values.yaml",
}


@pytest.fixture(scope="module")
def example(synthesized_platform: Callable[[PlatformSpec], Synthesized]) -> Synthesized:
    return synthesized_platform(PlatformSpec.from_yaml(EXAMPLE))


def _helm_releases(synth: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        r["Properties"]["Chart"]: r["Properties"]
        for _, _, r in synth.all_resources("Custom::AWSCDK-EKS-HelmChart")
    }


def _pinned_values(chart: str) -> Any:
    text = (UPSTREAM / VALUES[chart]).read_text()
    # The operator's chart is released with its image tag written in (hack/generate-helm.sh).
    return yaml.safe_load(text.replace("{{ tag }}", versions.KNATIVE_OPERATOR_CHART.version))


@pytest.mark.synth
@EXAMPLE_GROUP
def test_cdk_nag_cfn_lint_and_pins_are_clean(example: Synthesized) -> None:
    report = json.loads((example.outdir / "validation-report.json").read_text())
    assert report["pluginReports"] == []
    for name, template in example.templates.items():
        assert cfn_lint_errors(template) == [], name
        assert not LATEST.findall(json.dumps(template)), name


@pytest.mark.synth
@EXAMPLE_GROUP
def test_the_add_ons_releases_are_pinned_and_their_values_exist(example: Synthesized) -> None:
    releases = _helm_releases(example)
    for pinned in (
        versions.CERT_MANAGER_CHART,
        versions.KNATIVE_OPERATOR_CHART,
        versions.KSERVE_CRD_CHART,
        versions.KSERVE_CHART,
    ):
        release = releases[pinned.chart]
        assert (release["Repository"], release["Version"]) == (pinned.repository, pinned.version)
    for chart in VALUES:
        values = json.loads(releases[chart].get("Values", "{}"))
        assert values, chart
        assert missing_keys(values, _pinned_values(chart)) == [], chart


@pytest.mark.synth
@EXAMPLE_GROUP
def test_no_role_for_kserve_knative_or_cert_manager(example: Synthesized) -> None:
    associations = [
        r["Properties"]["Namespace"]
        for _, _, r in example.all_resources("AWS::EKS::PodIdentityAssociation")
    ]
    assert not {"kserve", "knative-serving", "knative-operator", "cert-manager"} & set(associations)
    # The deployment's own identity (Run:ai streamer) is there, in the inference namespace.
    assert "inference" in associations


def test_the_reference_platform_needs_no_kserve() -> None:
    platform = PlatformSpec.from_yaml(REFERENCE_PLATFORM)
    assert not [c for s in platform.deployments for c in engine_needs(s).custom_resources]
    assert Path(EXAMPLE).is_file()
