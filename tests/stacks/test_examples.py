"""The example platforms under ``examples/``: synthesized credential-free, lint- and nag-clean."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from eks_inference.specification.platform import PlatformSpec
from tests.helpers.deployed import applied_differences
from tests.helpers.platforms import EXAMPLES
from tests.helpers.synthesis import Synthesized, cfn_lint_errors, example_group

LATEST = re.compile(r":latest\b")


@pytest.mark.parametrize(
    "path", [pytest.param(path, id=path.stem, marks=example_group(path)) for path in EXAMPLES]
)
@pytest.mark.synth
def test_an_example_platform_synthesizes_clean(
    path: Path, synthesized_platform: Callable[[PlatformSpec], Synthesized]
) -> None:
    synth = synthesized_platform(PlatformSpec.from_yaml(path))
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    assert report["pluginReports"] == []
    for name, template in synth.templates.items():
        assert cfn_lint_errors(template) == [], name
        assert not LATEST.findall(json.dumps(template)), name


@pytest.mark.parametrize(
    "path", [pytest.param(path, id=path.stem, marks=example_group(path)) for path in EXAMPLES]
)
@pytest.mark.synth
def test_each_deployment_applies_what_is_rendered_for_it_in_one_manifest_resource(
    path: Path, synthesized_platform: Callable[[PlatformSpec], Synthesized]
) -> None:
    platform = PlatformSpec.from_yaml(path)
    compared, differences = applied_differences(synthesized_platform(platform), platform)
    assert differences == []
    assert compared > len(platform.deployments)
