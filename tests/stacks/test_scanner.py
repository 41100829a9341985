"""checkov on what the platform produces: every finding fixed or acknowledged, and none stale.

checkov, the version ``requirements-checkov.txt`` pins (in its own environment, which
``make setup-dev`` makes), scans ``k8s_manifests/`` as Kubernetes and every template of the
reference app in both provisioning modes as CloudFormation, in one run. A finding is accepted
only by an entry of ``checkov-acknowledgements.yaml`` that names its check and its resource and
gives a reason; a resource of an entry that no finding matches is stale and fails as well, so
the file lists exactly what is accepted today.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.platforms import REPO
from tests.helpers.synthesis import Synthesized

ACKNOWLEDGEMENTS = REPO / "checkov-acknowledgements.yaml"
PINS = REPO / "requirements-checkov.txt"
MANIFESTS = REPO / "k8s_manifests"
FRAMEWORKS = ("kubernetes", "cloudformation")
# The page that says what the scanner finds and how to run it.
SECURITY_PAGE = REPO / "docs/security.md"
CHECK_ID = re.compile(r"^CKV_(K8S|AWS)_[0-9]+$")
# No network: no update check against PyPI when checkov starts, no download of policies or
# of their metadata from a platform account.
OFFLINE = {"CKV_SKIP_PACKAGE_UPDATE_CHECK": "True", "BC_SKIP_MAPPING": "TRUE"}


@dataclass(frozen=True)
class Finding:
    """A failed check on one resource: Kubernetes objects are named ``<namespace>/<name>``,
    CloudFormation resources by their construct path."""

    framework: str
    check: str
    kind: str
    name: str
    file: str

    def __str__(self) -> str:
        return f"{self.check} {self.kind} {self.name} ({self.file})"


@dataclass(frozen=True)
class Acknowledgement:
    """One resource pattern of an entry of the acknowledgement file."""

    framework: str
    check: str
    kind: str
    pattern: str
    reason: str

    def accepts(self, finding: Finding) -> bool:
        return (
            (finding.framework, finding.check, finding.kind)
            == (self.framework, self.check, self.kind)
        ) and fnmatch.fnmatchcase(finding.name, self.pattern)

    def __str__(self) -> str:
        return f"{self.framework}: {self.check} {self.kind} {self.pattern}"


@dataclass(frozen=True)
class Scan:
    """checkov's summary of each framework, its findings, and what it was given to read."""

    summaries: dict[str, dict[str, Any]]
    findings: list[Finding]
    #: The resources checkov should have read, by framework.
    given: dict[str, int]


def pinned_version() -> str:
    """The checkov version of ``requirements-checkov.txt``."""
    (version,) = [
        line.removeprefix("checkov==")
        for line in PINS.read_text().splitlines()
        if line.startswith("checkov==")
    ]
    return version


def acknowledgements() -> list[Acknowledgement]:
    """Every resource pattern of the acknowledgement file, each entry checked for a known
    framework, a check id, resources as ``<kind> <pattern>`` and a reason."""
    document = yaml.safe_load(ACKNOWLEDGEMENTS.read_text())
    assert set(document) <= set(FRAMEWORKS), set(document)
    found = []
    for framework, entries in document.items():
        for entry in entries:
            assert set(entry) == {"check", "resources", "reason"}, entry
            assert CHECK_ID.match(entry["check"]), entry
            assert entry["reason"].strip(), entry
            assert entry["resources"], entry
            for resource in entry["resources"]:
                kind, pattern = resource.split(" ")
                found.append(
                    Acknowledgement(framework, entry["check"], kind, pattern, entry["reason"])
                )
    return found


def scan(manifests: Sequence[Path], templates: dict[Path, dict[str, Any]]) -> Scan:
    """checkov's failed checks on ``manifests`` (Kubernetes) and ``templates`` (CloudFormation,
    by file), in one run, with each framework's summary."""
    checkov = shutil.which("checkov")
    if checkov is None:
        pytest.fail(f"no checkov on PATH: `make setup-dev` installs the one {PINS.name} pins")
    files = [arg for path in (*manifests, *templates) for arg in ("--file", str(path))]
    options = ["--quiet", "--compact", "--skip-download", "--output", "json"]
    result = subprocess.run(
        [checkov, "--framework", *FRAMEWORKS, *options, *files],
        capture_output=True,
        text=True,
        env={**os.environ, **OFFLINE},
        check=False,
        timeout=300,
    )
    # Exit status 1 is a failed check, which the acknowledgements are there to read.
    assert result.returncode in (0, 1), result.stderr
    parsed = json.loads(result.stdout)
    reports = {report["check_type"]: report for report in parsed}
    assert set(reports) == set(FRAMEWORKS), set(reports)
    findings = [
        finding
        for framework, report in reports.items()
        for finding in _findings(framework, report["results"]["failed_checks"], templates)
    ]
    objects = [o for path in manifests for o in yaml.safe_load_all(path.read_text()) if o]
    # checkov reads the pod template of a workload as a Pod of its own.
    pods = [
        o for o in objects if "containers" in o.get("spec", {}).get("template", {}).get("spec", {})
    ]
    counted = {
        "kubernetes": len(objects) + len(pods),
        "cloudformation": sum(len(template["Resources"]) for template in templates.values()),
    }
    return Scan({f: r["summary"] for f, r in reports.items()}, findings, counted)


def _findings(
    framework: str, failed: list[dict[str, Any]], templates: dict[Path, dict[str, Any]]
) -> Iterator[Finding]:
    for check in failed:
        path = Path(check["file_abs_path"]).resolve()
        if framework == "kubernetes":
            # checkov names an object <kind>.<namespace>.<name>.
            kind, namespace, name = check["resource"].split(".", 2)
            where = str(path.relative_to(REPO))
            yield Finding(framework, check["check_id"], kind, f"{namespace}/{name}", where)
        else:
            kind, logical_id = check["resource"].split(".", 1)
            resource = templates[path]["Resources"][logical_id]
            construct = resource["Metadata"]["aws:cdk:path"]
            yield Finding(framework, check["check_id"], kind, construct, path.name)


@pytest.fixture(scope="module")
def scanned(reference: Synthesized, reference_karpenter: Synthesized) -> Scan:
    templates = {
        path.resolve(): synth.templates[key]
        for synth in (reference, reference_karpenter)
        for key, path in synth.template_files.items()
    }
    return scan(sorted(MANIFESTS.rglob("*.yaml")), templates)


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_the_pinned_checkov_read_every_object_and_resource(scanned: Scan) -> None:
    for framework, summary in scanned.summaries.items():
        assert summary["checkov_version"] == pinned_version(), framework
        assert summary["parsing_errors"] == 0, framework
        assert summary["passed"] > 0, framework
        assert summary["resource_count"] == scanned.given[framework], framework


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_every_finding_is_fixed_or_acknowledged(scanned: Scan) -> None:
    accepted = acknowledgements()
    unaccepted = [str(f) for f in scanned.findings if not any(a.accepts(f) for a in accepted)]
    assert unaccepted == [], f"fix each, or acknowledge it in {ACKNOWLEDGEMENTS.name}"


@pytest.mark.synth
@pytest.mark.xdist_group("synth")
def test_no_acknowledgement_is_stale(scanned: Scan) -> None:
    stale = [str(a) for a in acknowledgements() if not any(map(a.accepts, scanned.findings))]
    assert stale == [], f"remove from {ACKNOWLEDGEMENTS.name}: no finding matches them"


def test_the_security_page_names_the_pinned_checkov() -> None:
    page = SECURITY_PAGE.read_text()
    assert f"[checkov](https://www.checkov.io/) {pinned_version()} scans" in page
    assert f"checkov {pinned_version()} pins" in page
    assert f"checkov {pinned_version()} pins" in PINS.read_text().replace("\n# ", " ")


def test_the_security_pages_commands_scan_the_frameworks_this_test_scans() -> None:
    page = SECURITY_PAGE.read_text()
    commands = re.findall(r"^\.venv/bin/checkov (.+)$", page, re.MULTILINE)
    assert len(commands) == len(FRAMEWORKS)
    for command, framework, folder in zip(
        commands, FRAMEWORKS, ("k8s_manifests", "cdk.out"), strict=True
    ):
        assert command.split() == ["--framework", framework, "-d", folder, "--skip-download"]
