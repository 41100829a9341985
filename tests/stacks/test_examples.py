"""The example platforms under ``examples/``: synthesized credential-free, lint- and nag-clean."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import Synthesized, cdk_context, cfn_lint_errors, synthesize

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
LATEST = re.compile(r":latest\b")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_an_example_platform_synthesizes_clean(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aws_cdk import App

    from eks_inference.spec.platform import PlatformSpec
    from eks_inference.stacks import build_app

    for variable in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(variable, raising=False)
    app, stack = build_app(
        PlatformSpec.from_yaml(path), app=App(context=cdk_context(), outdir=str(tmp_path))
    )
    synth: Synthesized = synthesize(app, stack, tmp_path)
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    assert report["pluginReports"] == []
    for name, template in synth.templates.items():
        assert cfn_lint_errors(template) == [], name
        assert not LATEST.findall(json.dumps(template)), name
