"""The own app ``docs/constructs.md`` shows synthesizes as written, outside the reference app.

The page's ``cdk.json`` and ``app.py`` are copied from the page into a folder of their own,
which holds nothing of the project's, and the pinned CDK CLI synthesizes them there through
``python -m eks_inference.nodejs``, as the page says to. The app starts from the library's
feature flags: a resource that only one of them makes (the custom resource that empties the
VPC's default security group, ``@aws-cdk/aws-ec2:restrictDefaultSecurityGroup``) is in the
template.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from eks_inference import CDK_FEATURE_FLAGS
from tests.helpers.platforms import REPO

PAGE = REPO / "docs" / "constructs.md"
CDK_CLI = REPO / "node_modules" / ".bin" / "cdk"
_FENCED = re.compile(r"^```(json|python)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_TIMEOUT_S = 300

pytestmark = [pytest.mark.synth, pytest.mark.xdist_group("own-app")]


def _page_files() -> dict[str, str]:
    """The page's first JSON block (``cdk.json``) and first Python block (``app.py``)."""
    found: dict[str, str] = {}
    for language, text in _FENCED.findall(PAGE.read_text(encoding="utf-8")):
        found.setdefault({"json": "cdk.json", "python": "app.py"}[language], text)
    return found


def _jsii_package_cache() -> str:
    """The directory jsii's runtime caches unpacked packages in for this user."""
    configured = os.environ.get("JSII_RUNTIME_PACKAGE_CACHE_ROOT")
    return configured or str(Path.home() / ".cache" / "aws" / "jsii" / "package-cache")


def test_the_page_shows_both_files() -> None:
    files = _page_files()
    assert set(files) == {"cdk.json", "app.py"}
    assert json.loads(files["cdk.json"]) == {"app": "python app.py"}
    assert "cdk.App(context=dict(CDK_FEATURE_FLAGS))" in files["app.py"]


def test_the_pages_app_synthesizes_in_a_folder_of_its_own(tmp_path: Path) -> None:
    app_dir = tmp_path / "serving"
    app_dir.mkdir()
    for name, text in _page_files().items():
        (app_dir / name).write_text(text, encoding="utf-8")
    env = {
        **{k: v for k, v in os.environ.items() if k != "JSII_NODE"},
        # The app's `python` is this environment's, where the library is installed.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "HOME": str(tmp_path),
        # Still the user's package cache, so that jsii does not unpack aws-cdk-lib again
        # (about 2.5 s of CPU); nothing of the project is read from it.
        "JSII_RUNTIME_PACKAGE_CACHE_ROOT": _jsii_package_cache(),
        "CDK_DISABLE_CLI_TELEMETRY": "true",
        "CDK_DISABLE_VERSION_CHECK": "true",
    }
    command = [sys.executable, "-m", "eks_inference.nodejs", str(CDK_CLI)]
    flags = ["--no-notices", "--no-version-reporting", "synth", "--quiet", "--output", "out"]
    result = subprocess.run(
        [*command, *flags],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    template = json.loads((app_dir / "out" / "Serving.template.json").read_text())
    types = {resource["Type"] for resource in template["Resources"].values()}
    assert {"AWS::EKS::Cluster", "AWS::S3::Bucket", "Custom::AWSCDK-EKS-KubernetesResource"} <= (
        types
    )
    assert CDK_FEATURE_FLAGS["@aws-cdk/aws-ec2:restrictDefaultSecurityGroup"] is True
    assert "Custom::VpcRestrictDefaultSG" in types
