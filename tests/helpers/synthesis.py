"""Synthesized apps as the tests read them, built with the context `cdk synth` passes, and
cfn-lint's findings on their templates, linted once per test process.

Apps are built with the context the CDK CLI passes, so feature flags and template metadata
(and with them template sizes) are those of ``cdk synth``. The session's apps are the fixtures
of ``tests/conftest.py``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eks_inference.cdk_feature_flags import CDK_FEATURE_FLAGS
from eks_inference.specification.platform import PlatformSpec
from tests.helpers.platforms import REPO

STACK_NAME = "InferenceStack"


def cdk_context() -> dict[str, Any]:
    """The context `cdk synth` gives the app, read from cdk.json (and cdk.context.json).

    An in-process ``App()`` reads neither file: the CLI passes their context (feature flags and
    cached lookups) and adds keys derived from cdk.json's settings, mirrored here: path and
    asset metadata on every resource (part of the template bytes CloudFormation limits),
    version reporting, and the stacks to bundle. The CLI also turns off failing synth on
    validation errors and reports them itself; tests keep the default, so an unacknowledged
    cdk-nag finding fails the fixture at once.
    """
    settings: dict[str, Any] = json.loads((REPO / "cdk.json").read_text())
    # The app starts from the library's feature flags, which cdk.json's context may override.
    context: dict[str, Any] = dict(CDK_FEATURE_FLAGS)
    cached = REPO / "cdk.context.json"
    if cached.is_file():
        context.update(json.loads(cached.read_text()))
    context.update(settings.get("context", {}))
    if settings.get("pathMetadata", True):
        context["aws:cdk:enable-path-metadata"] = True
    if settings.get("assetMetadata", True):
        context["aws:cdk:enable-asset-metadata"] = True
    if settings.get("versionReporting", True):
        context["aws:cdk:version-reporting"] = True
    else:
        context["aws:cdk:disable-version-reporting"] = True
    context["aws:cdk:bundling-stacks"] = settings.get("bundlingStacks", ["**"])
    return context


@dataclass(frozen=True)
class Synthesized:
    """A synthesized app: its output folder and every template, nested stacks included.

    ``templates``, ``template_files`` and ``template_bytes`` are keyed by stack name for
    deployed stacks and by construct path (``InferenceStack/Deployment-<name>``) for nested
    stacks; ``template_bytes`` is the size of each file CloudFormation receives.
    """

    outdir: Path
    templates: dict[str, dict[str, Any]]
    template_files: dict[str, Path]
    template_bytes: dict[str, int]
    stack: Any
    template: Any

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        """Resources of one type in the main stack, by logical id."""
        return {
            logical_id: resource
            for logical_id, resource in self.templates[STACK_NAME]["Resources"].items()
            if resource["Type"] == resource_type
        }

    def all_resources(self, resource_type: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """``(template key, logical id, resource)`` of one type across every template."""
        for key, template in self.templates.items():
            for logical_id, resource in template["Resources"].items():
                if resource["Type"] == resource_type:
                    yield key, logical_id, resource

    def nested(self, path: str) -> dict[str, Any]:
        """The template of the nested stack at construct path ``path``."""
        return self.templates[path]


def synthesize(app: Any, stack: Any, outdir: Path) -> Synthesized:
    """Synthesize ``app`` (which writes to ``outdir``) and read back every template."""
    from aws_cdk import NestedStack
    from aws_cdk.assertions import Template

    assembly = app.synth()
    files = {s.stack_name: outdir / s.template_file for s in assembly.stacks}
    for construct in app.node.find_all():
        if isinstance(construct, NestedStack):
            files[construct.node.path] = outdir / construct.template_file
    templates = {key: json.loads(path.read_text()) for key, path in files.items()}
    return Synthesized(
        outdir=outdir,
        templates=templates,
        template_files=files,
        template_bytes={key: path.stat().st_size for key, path in files.items()},
        stack=stack,
        template=Template.from_json(templates[STACK_NAME]),
    )


#: The provisioning modes a platform synthesizes in: managed node groups, and Karpenter.
PROVISIONING_MODES = ("managed", "karpenter")


def in_provisioning_modes(
    synthesized_platform: Callable[[PlatformSpec], Synthesized], example: Path
) -> Callable[[str], Synthesized]:
    """``example``'s platform synthesized in a mode of :data:`PROVISIONING_MODES`, each once
    per run (through the run's ``synthesized_platform``)."""
    platform = PlatformSpec.from_yaml(example)

    def of(mode: str) -> Synthesized:
        return synthesized_platform(
            platform if mode == "managed" else platform.with_node_provisioning("karpenter")
        )

    return of


def example_group(example: Path) -> pytest.MarkDecorator:
    """The xdist group of the tests of the example platform ``example`` (a file of
    :data:`~tests.helpers.platforms.EXAMPLES`): they run on one worker, which synthesizes and
    lints it once."""
    return pytest.mark.xdist_group(f"example-{example.stem}")


@functools.cache
def _lint(text: str, regions: tuple[str, ...]) -> tuple[Any, ...]:
    """cfn-lint's matches on the template ``text`` in ``regions``, with every rule (as
    ``cfnlint.api.lint_all``). Cached per test process: the matches depend on the text and
    the regions alone, and modules that check the same app lint the same templates (the two
    provisioning modes share their nested stacks; an example is checked by two modules)."""
    from cfnlint.api import ManualArgs, lint

    args = ManualArgs(include_checks=["I"], include_experimental=True, regions=list(regions))
    return tuple(lint(text, config=args))


def lint_all(text: str) -> tuple[Any, ...]:
    """``cfnlint.api.lint_all(text)``: every rule, in every region (linted once per text)."""
    from cfnlint.api import REGIONS

    return _lint(text, tuple(REGIONS))


def cfn_lint_errors(template: dict[str, Any]) -> list[str]:
    """cfn-lint's errors on ``template``: every rule, in every region (as ``lint_all``), or in
    the regions the template's own cfn-lint configuration names, as the cfn-lint command reads
    it (a nested stack of FSx for Lustre names its bucket's region, since FSx is not offered
    in every one)."""
    from cfnlint.api import REGIONS

    regions = template.get("Metadata", {}).get("cfn-lint", {}).get("config", {}).get("regions")
    return [
        f"{m.rule.id} {m.message} at {'/'.join(map(str, m.path))}"
        for m in _lint(json.dumps(template), tuple(regions or REGIONS))
        if m.rule.severity == "error"
    ]
